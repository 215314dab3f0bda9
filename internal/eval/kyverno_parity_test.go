//go:build kyverno

package eval_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// kyvernoPairs maps each ClusterPolicy of the kyverno-policies chart (in the
// Kyverno module hack/tools/kyverno pins) to the library rule with the same
// intent (docs/library.md's tables, and each rule file's first line). A
// chart policy missing here fails the benchmark: a new one needs a pair.
var kyvernoPairs = []struct{ policy, rule, file string }{
	{"disallow-capabilities", "pss-baseline-capabilities", "pod-security/baseline/capabilities.yaml"},
	{"disallow-host-namespaces", "pss-baseline-host-namespaces", "pod-security/baseline/host-namespaces.yaml"},
	{"disallow-host-path", "pss-baseline-host-path-volumes", "pod-security/baseline/host-path-volumes.yaml"},
	{"disallow-host-ports", "pss-baseline-host-ports", "pod-security/baseline/host-ports.yaml"},
	{"disallow-host-process", "pss-baseline-windows-host-process", "pod-security/baseline/windows-host-process.yaml"},
	{"disallow-privileged-containers", "pss-baseline-privileged", "pod-security/baseline/privileged.yaml"},
	{"disallow-proc-mount", "pss-baseline-proc-mount", "pod-security/baseline/proc-mount.yaml"},
	{"disallow-selinux", "pss-baseline-se-linux-options", "pod-security/baseline/se-linux-options.yaml"},
	{"restrict-apparmor-profiles", "pss-baseline-app-armor-profile", "pod-security/baseline/app-armor-profile.yaml"},
	{"restrict-seccomp", "pss-baseline-seccomp-profile", "pod-security/baseline/seccomp-profile.yaml"},
	{"restrict-sysctls", "pss-baseline-sysctls", "pod-security/baseline/sysctls.yaml"},
	{"disallow-capabilities-strict", "pss-restricted-capabilities", "pod-security/restricted/capabilities.yaml"},
	{"disallow-privilege-escalation", "pss-restricted-allow-privilege-escalation", "pod-security/restricted/allow-privilege-escalation.yaml"},
	{"require-run-as-non-root-user", "pss-restricted-run-as-user", "pod-security/restricted/run-as-user.yaml"},
	{"require-run-as-nonroot", "pss-restricted-run-as-non-root", "pod-security/restricted/run-as-non-root.yaml"},
	{"restrict-seccomp-strict", "pss-restricted-seccomp-profile", "pod-security/restricted/seccomp-profile.yaml"},
	{"restrict-volume-types", "pss-restricted-restricted-volumes", "pod-security/restricted/restricted-volumes.yaml"},
	{"require-non-root-groups", "require-non-root-groups", "other/require-non-root-groups.yaml"},
}

// kyvernoPolicyKinds are the two forms the kyverno-policies chart renders
// its policies in (its policyType value): the pattern ClusterPolicies, and
// the CEL ValidatingPolicies, its default in chart 3.9.1 (Kyverno 1.19.1). They are
// separate policies whose verdicts differ, so both are compared.
// PORTAL_KYVERNO_POLICY_KINDS narrows them (comma-separated).
var kyvernoPolicyKinds = []string{"ClusterPolicy", "ValidatingPolicy"}

// BenchmarkKyvernoParity runs `kyverno apply` with every policy of the
// kyverno-policies chart, in each of kyvernoPolicyKinds (rendered by
// bin/helm from the Kyverno module at benchmark time, never copied here),
// and `portal eval` with the paired library rules on the same generated
// workloads: a compliant pod and one variant per field each policy reads,
// in every container list, each as a Pod, a Deployment and a CronJob. It
// prints, per pair, how many objects both decide alike, and fails when a
// difference is not in docs/library.md's "Parity with Kyverno" table, when
// that table lists one that no longer appears, or when a Pod Security
// Standards rule decides a generated Pod unlike pod-security-admission
// (the docs explain the differences by the standard).
func BenchmarkKyvernoParity(b *testing.B) {
	kyverno := os.Getenv("PORTAL_KYVERNO")
	if kyverno == "" {
		b.Fatal("PORTAL_KYVERNO must name the Kyverno CLI: run make bench-eval-kyverno")
	}
	kinds := kyvernoPolicyKinds
	if only := os.Getenv("PORTAL_KYVERNO_POLICY_KINDS"); only != "" {
		kinds = strings.Split(only, ",")
	}
	dir := b.TempDir()
	policies := map[string]string{}
	for _, kind := range kinds {
		policies[kind] = renderKyvernoPolicies(b, dir, kind)
	}
	cases := parityCases()
	input := filepath.Join(dir, "workloads.yaml")
	var buf bytes.Buffer
	for _, obj := range parityObjects(cases) {
		buf.WriteString("---\n")
		buf.Write(must(yaml.Marshal(obj)))
	}
	if err := os.WriteFile(input, buf.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	bin, _, _ := cliSetup(b, dir, 1)
	var rules []string
	for _, p := range kyvernoPairs {
		rules = append(rules, filepath.Join("..", "..", "examples", "rules", p.file))
	}

	portalOut := filepath.Join(dir, "portal.json")
	var portalWall time.Duration
	kyvernoWall := map[string]time.Duration{}
	for b.Loop() {
		w, _ := runOneCore(b, portalOut, bin, "eval", "--rules", strings.Join(rules, ","), "--file", input, "-o", "json")
		portalWall += w
		for _, kind := range kinds {
			w, _ = runOneCore(b, filepath.Join(dir, kind+".json"), kyverno, "apply", policies[kind], "--resource", input, "--policy-report", "--output-format", "json")
			kyvernoWall[kind] += w
		}
	}
	b.StopTimer()

	portal := portalVerdictsByRule(b, portalOut)
	b.ReportMetric(float64(checkPSA(b, cases, portal)), "psa-pod-verdicts")
	found := map[differenceKey][]string{}
	for _, kind := range kinds {
		rows, diffs := compareParity(kind, cases, portal, kyvernoVerdictsByPolicy(b, filepath.Join(dir, kind+".json")))
		printParity(b, kind, rows)
		maps.Copy(found, diffs)
		b.ReportMetric(kyvernoWall[kind].Seconds()/float64(b.N), "kyverno-"+strings.ToLower(kind)+"-s")
	}
	checkDocumented(b, kinds, found)
	b.ReportMetric(float64(len(kyvernoPairs)), "pairs")
	b.ReportMetric(float64(len(cases)*len(parityKinds)), "objects")
	b.ReportMetric(float64(len(found)), "differences")
	b.ReportMetric(portalWall.Seconds()/float64(b.N), "portal-s")
}

// checkDocumented fails on each difference docs/library.md does not list,
// and on each it lists, for a policy kind that ran, that did not appear.
func checkDocumented(b *testing.B, kinds []string, found map[differenceKey][]string) {
	documented := documentedDifferences(b)
	for _, key := range slices.SortedFunc(maps.Keys(found), compareDifferenceKeys) {
		if !documented[key] {
			b.Errorf("%s %s / %s: case %s differs (%s) and docs/library.md's parity table does not list it: fix the rule or add the row",
				key.kind, key.policy, pairRule(key.policy), key.caseName, strings.Join(found[key], "; "))
		}
	}
	for _, key := range slices.SortedFunc(maps.Keys(documented), compareDifferenceKeys) {
		if slices.Contains(kinds, key.kind) && found[key] == nil {
			b.Errorf("docs/library.md lists %s %s / case %s as a difference, but both now agree: remove the row", key.kind, key.policy, key.caseName)
		}
	}
}

// renderKyvernoPolicies renders the kyverno-policies chart of the module
// hack/tools/kyverno pins, every baseline, restricted and other policy as a
// kind (ClusterPolicy or ValidatingPolicy), into dir, checks that each has
// a pair, and returns the file.
func renderKyvernoPolicies(b *testing.B, dir, kind string) string {
	mod := exec.Command("go", "mod", "download", "-json", "github.com/kyverno/kyverno")
	mod.Dir = filepath.Join("..", "..", "hack", "tools", "kyverno")
	out, err := mod.Output()
	if err != nil {
		b.Fatalf("go mod download github.com/kyverno/kyverno: %v", err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		b.Fatalf("go mod download: no module directory (%v): %s", err, out)
	}
	chart := filepath.Join(m.Dir, "charts", "kyverno-policies")
	others, err := filepath.Glob(filepath.Join(chart, "templates", "other", "*.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for _, f := range others {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if !strings.HasSuffix(name, ".cel") && name != "custom-policies" {
			names = append(names, name)
		}
	}
	helm := exec.Command(filepath.Join("..", "..", "bin", "helm"), "template", "kyverno-policies", chart,
		"--set", "policyType="+kind, "--set", "podSecurityStandard=restricted",
		"--set", "includeOtherPolicies={"+strings.Join(names, ",")+"}")
	var stderr bytes.Buffer
	helm.Stderr = &stderr
	rendered, err := helm.Output()
	if err != nil {
		b.Fatalf("helm template %s: %v: %s", chart, err, stderr.String())
	}
	path := filepath.Join(dir, kind+"-policies.yaml")
	if err := os.WriteFile(path, rendered, 0o600); err != nil {
		b.Fatal(err)
	}
	checkPairs(b, path, kind)
	return path
}

// checkPairs fails unless the rendered chart's policies of kind are
// exactly the pairs' policies.
func checkPairs(b *testing.B, path, kind string) {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var got []string
	for doc := range strings.SplitSeq(string(data), "\n---") {
		var p struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
			b.Fatalf("rendered chart: %v", err)
		}
		if p.Kind == kind {
			got = append(got, p.Metadata.Name)
		}
	}
	var want []string
	for _, p := range kyvernoPairs {
		want = append(want, p.policy)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		b.Fatalf("the chart renders %ss %v; kyvernoPairs pairs %v: pair each with a library rule", kind, got, want)
	}
}

func pairRule(policy string) string {
	for _, p := range kyvernoPairs {
		if p.policy == policy {
			return p.rule
		}
	}
	return "?"
}

func compareDifferenceKeys(a, b differenceKey) int {
	return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.policy, b.policy), cmp.Compare(a.caseName, b.caseName))
}

// objectKey is Kind/name: every generated object is in namespace parity.
type objectKey struct{ kind, name string }

// verdicts are fail, pass or error per rule (or policy) and object; an
// object a rule reported nothing for is absent (a pass).
type verdicts map[string]map[objectKey]string

func (v verdicts) add(rule string, obj objectKey, result string) {
	if v[rule] == nil {
		v[rule] = map[objectKey]string{}
	}
	// fail and error outrank pass (and skip): one failing container or
	// Kyverno rule fails the object. warn is a violation too (a warn rule
	// in portal test, Kyverno's --audit-warn).
	if result == "warn" {
		result = "fail"
	}
	switch prev := v[rule][obj]; {
	case result == "fail" || result == "error":
		if prev != "fail" {
			v[rule][obj] = result
		}
	case prev == "":
		v[rule][obj] = "pass"
	}
}

func (v verdicts) of(rule string, obj objectKey) string {
	if r := v[rule][obj]; r != "" {
		return r
	}
	return "pass"
}

func portalVerdictsByRule(b *testing.B, path string) verdicts {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var rep struct {
		Results []struct {
			Resource struct{ Kind, Name string }
			Rule     string
			Result   string
		}
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		b.Fatalf("portal report: %v", err)
	}
	v := verdicts{}
	for _, r := range rep.Results {
		v.add(r.Rule, objectKey{r.Resource.Kind, r.Resource.Name}, r.Result)
	}
	return v
}

// kyvernoVerdictsByPolicy reads `kyverno apply -p --output-format json`'s
// policy reports (kyvernoVerdicts's format) per policy.
func kyvernoVerdictsByPolicy(b *testing.B, path string) verdicts {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	v := verdicts{}
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var rep struct {
			Results []struct {
				Policy, Result string
				Resources      []struct{ Kind, Name string }
			}
		}
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			b.Fatalf("kyverno report: %v", err)
		}
		for _, r := range rep.Results {
			for _, res := range r.Resources {
				v.add(r.Policy, objectKey{res.Kind, res.Name}, r.Result)
			}
		}
	}
	return v
}

// differenceKey is what the docs table lists: the Kyverno policy kind, a
// pair (by its Kyverno policy) and a generated case.
type differenceKey struct{ kind, policy, caseName string }

// parityRow is one pair's line of the printed table.
type parityRow struct {
	policy, rule    string
	objects, agree  int
	differingCases  []string
	portalStricter  int
	kyvernoStricter int
}

// compareParity decides, per pair and object, whether both CLIs agree, and
// returns the table's rows and each differing (pair, case) with the kinds
// and verdicts that differ.
func compareParity(kind string, cases []parityCase, portal, kyv verdicts) ([]parityRow, map[differenceKey][]string) {
	found := map[differenceKey][]string{}
	var rows []parityRow
	for _, p := range kyvernoPairs {
		row := parityRow{policy: p.policy, rule: p.rule}
		for _, c := range cases {
			differs := false
			for _, objKind := range parityKinds {
				obj := objectKey{objKind, c.name}
				pv, kv := portal.of(p.rule, obj), kyv.of(p.policy, obj)
				row.objects++
				if pv == kv {
					row.agree++
					continue
				}
				differs = true
				if pv == "fail" {
					row.portalStricter++
				} else if kv == "fail" {
					row.kyvernoStricter++
				}
				key := differenceKey{kind, p.policy, c.name}
				found[key] = append(found[key], fmt.Sprintf("%s: portal %s, kyverno %s", objKind, pv, kv))
			}
			if differs {
				row.differingCases = append(row.differingCases, c.name)
			}
		}
		rows = append(rows, row)
	}
	return rows, found
}

func printParity(b *testing.B, kind string, rows []parityRow) {
	var buf bytes.Buffer
	w := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "kyverno policy\tportal rule\tobjects\tagree\tportal fails only\tkyverno fails only\tdiffering cases")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", r.policy, r.rule, r.objects, r.agree,
			r.portalStricter, r.kyvernoStricter, strings.Join(r.differingCases, ", "))
	}
	w.Flush()
	b.Logf("parity per pair, Kyverno's %s form (objects: each case as Pod, Deployment and CronJob):\n%s", kind, buf.String())
}

// documentedDifferences reads docs/library.md's parity table: the rows of
// "| `policy` / `rule` | kind | `case`, `case` | why |" under its header
// in the "## Parity with Kyverno" section.
func documentedDifferences(b *testing.B) map[differenceKey]bool {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "library.md"))
	if err != nil {
		b.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Parity with Kyverno\n")
	if !ok {
		b.Fatal(`docs/library.md: no "## Parity with Kyverno" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	const header = "\n| pair | Kyverno policy kind | differing cases | why |\n|---|---|---|---|\n"
	_, table, ok := strings.Cut(section, header)
	if !ok {
		b.Fatalf("docs/library.md: no table %q under \"## Parity with Kyverno\"", header)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	code := regexp.MustCompile("`([^`]+)`")
	docs := map[differenceKey]bool{}
	for line := range strings.SplitSeq(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 6 {
			b.Fatalf("docs/library.md parity table: %q is not a row of four cells", line)
		}
		pair := code.FindAllStringSubmatch(cells[1], -1)
		if len(pair) != 2 || pairRule(pair[0][1]) != pair[1][1] {
			b.Fatalf("docs/library.md parity table: %q does not name a pair as `policy` / `rule`", cells[1])
		}
		kind := strings.TrimSpace(cells[2])
		if !slices.Contains(kyvernoPolicyKinds, kind) {
			b.Fatalf("docs/library.md parity table: kind %q is none of %v", kind, kyvernoPolicyKinds)
		}
		for _, c := range code.FindAllStringSubmatch(cells[3], -1) {
			docs[differenceKey{kind, pair[0][1], c[1]}] = true
		}
	}
	return docs
}
