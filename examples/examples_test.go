// Package examples_test checks the example rule bundles and manifests: every
// rule file loads, each best-practices rule passes its good fixture and fails
// its bad one, and the pod-security demo (`make run`) shows both a deny and a
// pass.
package examples_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

const (
	rulesDir         = "rules"
	bestPracticesDir = "rules/best-practices"
	podSecurityDir   = "rules/pod-security"
	manifestsDir     = "manifests"
	// legacyDir holds SpEL input for the converter, not Portal rules.
	legacyDir = "rules/poc"
)

// load compiles the rules in paths into a fresh engine and fails the test on
// any load error.
func load(t *testing.T, paths ...string) (*engine.Engine, []*engine.Rule) {
	t.Helper()
	eng := engine.New(exprlang.New())
	rules, errs := rule.LoadPaths(eng, paths)
	for _, err := range errs {
		t.Errorf("load rules: %v", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	eng.SetRules(rules)
	return eng, rules
}

// evaluate runs every rule of eng, whatever its mode, on each object in the
// manifest file at path.
func evaluate(t *testing.T, eng *engine.Engine, path string) []core.Result {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := manifest.Split(path, data)
	if len(docs) == 0 {
		t.Fatalf("%s holds no documents", path)
	}
	var out []core.Result
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			res, err := eng.Evaluate(context.Background(), obj, engine.Options{})
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			out = append(out, res...)
		}
	}
	return out
}

func describe(r core.Result) string {
	s := r.Resource.Kind + " " + r.Resource.Namespace + "/" + r.Resource.Name
	if r.Container != "" {
		s += " container " + r.Container
	}
	return s + ": " + string(r.Outcome) + ": " + r.Message
}

// bestPracticeFiles lists the rule files of the best-practices bundle: the
// YAML files at its top level (testdata/ holds the fixtures).
func bestPracticeFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(bestPracticesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 12 {
		t.Fatalf("%s holds %d rule files, want at least 12", bestPracticesDir, len(files))
	}
	return files
}

func TestBestPractices(t *testing.T) {
	files := bestPracticeFiles(t)
	eng, rules := load(t, files...)

	// One rule per file, named after the file, with a fixture folder of the
	// same name.
	fixtures := map[string]string{} // rule name -> fixture folder
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".yaml")
		var in []string
		for _, r := range rules {
			if r.Source.Path == f {
				in = append(in, r.Name)
			}
		}
		if len(in) != 1 || in[0] != base {
			t.Errorf("%s: holds rules %v, want exactly one rule named %q", f, in, base)
			continue
		}
		fixtures[base] = filepath.Join(bestPracticesDir, "testdata", base)
	}
	entries, err := os.ReadDir(filepath.Join(bestPracticesDir, "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := fixtures[e.Name()]; !ok {
			t.Errorf("testdata/%s has no rule file %s.yaml", e.Name(), e.Name())
		}
	}

	// Evaluate the whole bundle on every fixture once.
	results := map[string][]core.Result{} // fixture file -> results
	for _, dir := range fixtures {
		for _, kind := range []string{"good.yaml", "bad.yaml"} {
			p := filepath.Join(dir, kind)
			results[p] = evaluate(t, eng, p)
		}
	}

	t.Run("no-errors", func(t *testing.T) {
		for p, res := range results {
			for _, r := range res {
				if r.Outcome == core.OutcomeError {
					t.Errorf("%s: rule %s errored on %s", p, r.Rule.Name, describe(r))
				}
			}
		}
	})

	for _, r := range rules {
		t.Run(r.Name, func(t *testing.T) {
			if !strings.Contains(r.Message, "{{") {
				t.Errorf("message %q has no {{ }} hole", r.Message)
			}
			dir := fixtures[r.Name]
			if dir == "" {
				t.Fatalf("no fixtures")
			}
			t.Run("good", func(t *testing.T) {
				passed := false
				for _, res := range results[filepath.Join(dir, "good.yaml")] {
					if res.Rule.Name != r.Name {
						continue
					}
					if res.Outcome != core.OutcomePass {
						t.Errorf("want pass: %s", describe(res))
					}
					passed = true
				}
				if !passed {
					t.Errorf("the rule matched no object in good.yaml")
				}
			})
			t.Run("bad", func(t *testing.T) {
				failed := false
				for _, res := range results[filepath.Join(dir, "bad.yaml")] {
					if res.Rule.Name != r.Name || res.Outcome != core.OutcomeFail {
						continue
					}
					failed = true
					if strings.Contains(res.Message, "<error") || strings.Contains(res.Message, "<nil>") || strings.Contains(res.Message, "\n") {
						t.Errorf("message renders badly: %q", res.Message)
					}
				}
				if !failed {
					t.Errorf("want at least one fail on bad.yaml")
				}
			})
		})
	}
}

// TestRuleFilesLoad loads every rule file under rules/ on its own, except the
// legacy SpEL input and test fixtures.
func TestRuleFilesLoad(t *testing.T) {
	var files []string
	err := filepath.WalkDir(rulesDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == legacyDir || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && filepath.Ext(path) == ".yaml" {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no rule files under %s", rulesDir)
	}
	for _, f := range files {
		t.Run(filepath.ToSlash(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rules, errs := rule.CompileFile(engine.New(exprlang.New()), f, data)
			for _, err := range errs {
				t.Error(err)
			}
			if len(errs) == 0 && len(rules) == 0 {
				t.Error("holds no rules")
			}
		})
	}
}

func readManifests(t *testing.T) []manifest.Document {
	t.Helper()
	docs, err := manifest.ReadPaths([]string{manifestsDir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatalf("no manifests in %s", manifestsDir)
	}
	return docs
}

func TestManifestsParse(t *testing.T) {
	kinds := map[string]int{}
	docsPerFile := map[string]int{}
	lists := 0
	for _, d := range readManifests(t) {
		docsPerFile[d.Path]++
		objs, err := d.Objects()
		if err != nil {
			t.Error(err)
			continue
		}
		if len(objs) == 0 {
			t.Errorf("%s:%d: no objects", d.Path, d.Line)
		}
		if len(objs) > 1 {
			lists++
		}
		for _, o := range objs {
			if o.GetName() == "" || o.GetNamespace() == "" {
				t.Errorf("%s:%d: %s without name or namespace", d.Path, d.Line, o.GetKind())
			}
			kinds[o.GetKind()]++
		}
	}
	if kinds["Pod"] == 0 || kinds["Deployment"] == 0 {
		t.Errorf("want Pods and Deployments, got %v", kinds)
	}
	// The demo shows off the input forms portal eval reads.
	if lists == 0 {
		t.Error("want a kind: List manifest")
	}
	multi := false
	for _, n := range docsPerFile {
		multi = multi || n > 1
	}
	if !multi {
		t.Error("want a multi-document manifest file")
	}
}

// TestPodSecurityDemo runs what `make run` runs: the pod-security bundle on
// examples/manifests.
func TestPodSecurityDemo(t *testing.T) {
	eng, _ := load(t, podSecurityDir)
	report, errs := eval.Run(eng, readManifests(t), "")
	for _, err := range errs {
		t.Error(err)
	}
	if report.Summary.Error > 0 {
		t.Errorf("%d rules errored", report.Summary.Error)
	}
	if !report.Denied() {
		t.Error("the demo denies nothing")
	}
	denied, passed := false, false
	// The compliant manifests must pass every pod-security rule.
	compliant := []string{"Deployment/web", "Pod/api"}
	for _, r := range report.Results {
		id := r.Resource.Kind + "/" + r.Resource.Name
		switch r.Result {
		case string(core.OutcomeFail):
			denied = denied || r.EnforcementAction == string(core.ActionDeny)
			if slices.Contains(compliant, id) {
				t.Errorf("compliant %s fails %s: %s", id, r.Rule, r.Message)
			}
		case string(core.OutcomePass):
			passed = true
		}
	}
	if !denied {
		t.Error("want at least one failing deny rule")
	}
	if !passed {
		t.Error("want at least one pass")
	}
	for _, id := range compliant {
		if !slices.ContainsFunc(report.Results, func(r eval.Result) bool { return r.Resource.Kind+"/"+r.Resource.Name == id }) {
			t.Errorf("no pod-security rule evaluated %s", id)
		}
	}
}
