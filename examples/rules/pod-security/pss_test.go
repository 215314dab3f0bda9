// Package podsecurity_test checks the Pod Security Standards bundle in
// baseline/ and restricted/ against the reference implementation,
// k8s.io/pod-security-admission: its fixture pods (this file) and its own
// evaluator on generated pods (variants_test.go).
package podsecurity_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/rule"
)

// TestRuleFilesCoverEveryCheck pins the bundle's layout to the reference
// implementation's checks: one file per check, in its level's folder, named
// after the check id, and nothing else. A new check in a future
// pod-security-admission release fails here until a rule is written for it.
func TestRuleFilesCoverEveryCheck(t *testing.T) {
	want := map[string][]string{}
	for _, c := range policy.DefaultChecks() {
		base := strings.TrimSuffix(strings.TrimSuffix(string(c.ID), "_baseline"), "_restricted")
		level := string(c.Level)
		want[level] = append(want[level], kebab(base)+".yaml")
	}
	wantKinds := make([]string, 0, len(podKinds))
	for _, k := range podKinds {
		group, _, _ := strings.Cut(k.apiVersion, "/")
		if !strings.Contains(k.apiVersion, "/") {
			group = ""
		}
		wantKinds = append(wantKinds, group+"/"+k.kind)
	}
	slices.Sort(wantKinds)
	severity := map[string]core.Severity{"baseline": core.SeverityHigh, "restricted": core.SeverityMedium}

	for _, level := range []string{"baseline", "restricted"} {
		slices.Sort(want[level])
		if got := ruleFiles(t, level); !slices.Equal(got, want[level]) {
			t.Errorf("%s/: files %v, want one per %s check: %v", level, got, level, want[level])
		}
		for _, f := range ruleFiles(t, level) {
			path := filepath.Join(level, f)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(data), "# PSS "+level+" ") {
				t.Errorf("%s: first line must quote the PSS check it implements (# PSS %s ...)", path, level)
			}
			rules, errs := rule.ParseFile(path, data)
			if len(errs) > 0 || len(rules) != 1 {
				t.Errorf("%s: want exactly one rule, got %d (errors: %v)", path, len(rules), errs)
				continue
			}
			r := rules[0]
			if want := "pss-" + level + "-" + strings.TrimSuffix(f, ".yaml"); r.Name != want {
				t.Errorf("%s: name %q, want %q", path, r.Name, want)
			}
			if r.Severity != severity[level] || r.EnforcementAction != core.ActionDeny || !r.HasMode(core.ModeAdmission) || !r.HasMode(core.ModeAudit) {
				t.Errorf("%s: severity %s, enforcementAction %s, modes %v; want %s, deny, admission and audit", path, r.Severity, r.EnforcementAction, r.Modes, severity[level])
			}
			var kinds []string
			for _, g := range r.Match.GVKs {
				kinds = append(kinds, g.Group+"/"+g.Kind)
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, wantKinds) {
				t.Errorf("%s: match.gvk %v, want every pod-shaped kind %v", path, kinds, wantKinds)
			}
		}
	}
}

// fixtureVersion is the newest vX.Y folder under dir.
func fixtureVersion(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	best, bestMajor, bestMinor := "", -1, -1
	for _, e := range entries {
		maj, min, ok := strings.Cut(strings.TrimPrefix(e.Name(), "v"), ".")
		x, err1 := strconv.Atoi(maj)
		y, err2 := strconv.Atoi(min)
		if !e.IsDir() || !ok || err1 != nil || err2 != nil {
			continue
		}
		if x > bestMajor || (x == bestMajor && y > bestMinor) {
			best, bestMajor, bestMinor = e.Name(), x, y
		}
	}
	if best == "" {
		t.Fatalf("no vX.Y fixture folder in %s", dir)
	}
	return best
}

// newestCheckVersion is the newest policy version any check has a revision
// for: what api.LatestVersion() resolves to in the evaluator.
func newestCheckVersion() api.Version {
	var v api.Version
	for _, c := range policy.DefaultChecks() {
		if last := c.Versions[len(c.Versions)-1].MinimumVersion; v.Older(last) {
			v = last
		}
	}
	return v
}

// TestFixtures runs the reference implementation's own fixture pods, at its
// newest policy version, through the bundle: every pod in <level>/<version>/pass
// must be allowed and every pod in .../fail denied by that level's rules,
// whatever pod-shaped kind carries the pod.
func TestFixtures(t *testing.T) {
	engines := loadLevels(t)
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(psaDir(t), "test", "testdata")
	total := 0
	for _, l := range levels {
		dir := filepath.Join(root, string(l.level))
		version := fixtureVersion(t, dir)
		counts := map[string]int{}
		for _, want := range []string{"pass", "fail"} {
			files, err := filepath.Glob(filepath.Join(dir, version, want, "*.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				counts[want]++
				checkFixture(t, f, l.level, want == "fail", engines[l.level], evaluator)
			}
		}
		total += counts["pass"] + counts["fail"]
		t.Logf("%s %s: %d pass and %d fail fixtures, each checked as %d kinds x %d encodings",
			l.level, version, counts["pass"], counts["fail"], len(podKinds), len(encodings))
		if counts["pass"] == 0 || counts["fail"] == 0 {
			t.Errorf("%s %s: want both pass and fail fixtures, got %v", l.level, version, counts)
		}
	}
	t.Logf("%d fixtures in all (newest check version %s)", total, newestCheckVersion())
	// v1.35 ships 49 baseline and 99 restricted fixtures; far fewer means
	// the folder layout changed and the walk above missed them.
	if total < 100 {
		t.Errorf("only %d fixtures found under %s", total, root)
	}
}

func checkFixture(t *testing.T, path string, level api.Level, wantDeny bool, eng *engine.Engine, evaluator policy.Evaluator) {
	t.Helper()
	name := filepath.Join(filepath.Base(filepath.Dir(filepath.Dir(path))), filepath.Base(filepath.Dir(path)), filepath.Base(path))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if pod.Kind != "Pod" {
		t.Fatalf("%s: kind %q, want Pod", name, pod.Kind)
	}

	// The defaulting must make the reference evaluator agree with the folder
	// too, or the comparison below would test the wrong object.
	ref := pod.DeepCopy()
	applyDefaults(&ref.Spec, true)
	agg := policy.AggregateCheckResults(evaluator.EvaluatePod(api.LevelVersion{Level: level, Version: api.LatestVersion()}, &ref.ObjectMeta, &ref.Spec))
	if agg.Allowed == wantDeny {
		t.Errorf("%s %s: pod-security-admission says allowed=%v (%s): test defaulting is off", level, name, agg.Allowed, agg.ForbiddenDetail())
	}

	for _, k := range podKinds {
		p := pod.DeepCopy()
		applyDefaults(&p.Spec, k.kind == "Pod")
		for _, enc := range encodings {
			obj, err := wrap(p, k, enc.encode)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			v, err := evaluate(eng, obj)
			if err != nil {
				t.Errorf("%s %s as %s (%s): %v", level, name, k.kind, enc.name, err)
				continue
			}
			if v.denied != wantDeny {
				t.Errorf("%s fixture %s as %s (%s): Portal says %s, want %s",
					level, name, k.kind, enc.name, v, map[bool]string{true: "deny", false: "allow"}[wantDeny])
			}
		}
	}
}
