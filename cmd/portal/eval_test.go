package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	evalRules     = "../../examples/rules/pod-security"
	evalManifests = "../../examples/manifests"
)

// TestEvalJSONShape checks the documented JSON report: every field of every
// result, a pass result for each matched and passing (rule, resource) pair,
// and summary counts that agree with the results.
func TestEvalJSONShape(t *testing.T) {
	out, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", evalManifests, "-o", "json")
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("exit code %d, want %d (the manifests hold violations): %v", code, exitViolation, err)
	}
	var report struct {
		Results []map[string]json.RawMessage `json:"results"`
		Summary map[string]int               `json:"summary"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&report); err != nil {
		t.Fatalf("decode report: %v\n%s", err, out)
	}
	counts := map[string]int{}
	for _, r := range report.Results {
		for _, k := range []string{"resource", "rule", "severity", "enforcementAction", "result"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("result lacks %q: %v", k, r)
			}
		}
		var res struct {
			APIVersion, Kind, Namespace, Name string
		}
		if err := json.Unmarshal(r["resource"], &res); err != nil || res.Kind == "" || res.Name == "" || res.APIVersion == "" {
			t.Fatalf("resource %s: %v", r["resource"], err)
		}
		var outcome string
		_ = json.Unmarshal(r["result"], &outcome)
		counts[outcome]++
	}
	for _, k := range []string{"pass", "fail", "error"} {
		if report.Summary[k] != counts[k] {
			t.Errorf("summary %s = %d, results say %d", k, report.Summary[k], counts[k])
		}
	}
	if counts["pass"] == 0 || counts["fail"] == 0 {
		t.Fatalf("want passes and failures, got %v", counts)
	}
}

func TestEvalExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n")
	badYAML := filepath.Join(dir, "bad.yaml")
	writeFile(t, badYAML, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [oops\n")
	badRule := filepath.Join(dir, "rule.yaml")
	writeFile(t, badRule, "name: r\nmatch: {gvk: [{kind: Pod}]}\nrule: 'container.name =='\n")
	warnRule := filepath.Join(dir, "warn.yaml")
	writeFile(t, warnRule, "name: w\nenforcementAction: warn\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\n")

	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no violation", []string{"--rules", evalRules, "--file", good}, exitOK, ""},
		{"deny", []string{"--rules", evalRules, "--file", evalManifests}, exitViolation, ""},
		{"warn only", []string{"--rules", warnRule, "--file", evalManifests}, exitOK, ""},
		{"bad manifest", []string{"--rules", evalRules, "--file", badYAML}, exitUsage, "bad.yaml:4"},
		{"bad rule", []string{"--rules", badRule, "--file", good}, exitUsage, "rule.yaml:3:24"},
		{"missing flag", []string{"--file", good}, exitUsage, "--rules"},
		{"bad output", []string{"--rules", evalRules, "--file", good, "-o", "xml"}, exitUsage, "--output"},
		{"missing file", []string{"--rules", evalRules, "--file", filepath.Join(dir, "nope.yaml")}, exitUsage, "nope.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runCLI(t, "", append([]string{"eval"}, tt.args...)...)
			if code := exitCodeOf(err); code != tt.code {
				t.Fatalf("exit code %d, want %d (%v)", code, tt.code, err)
			}
			if tt.msg != "" && (err == nil || !strings.Contains(err.Error(), tt.msg)) {
				t.Fatalf("error %v does not mention %q", err, tt.msg)
			}
		})
	}
}

func TestEvalFormatsAndStdin(t *testing.T) {
	pods, err := os.ReadFile(filepath.Join(evalManifests, "pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"table", "yaml", "junit"} {
		out, err := runCLI(t, string(pods), "eval", "--rules", evalRules, "--file", "-", "-o", format)
		if exitCodeOf(err) != exitViolation {
			t.Fatalf("%s: %v", format, err)
		}
		switch format {
		case "table":
			if !strings.Contains(out, "FAIL") || !strings.Contains(out, "passed,") {
				t.Fatalf("table:\n%s", out)
			}
		case "yaml":
			var v map[string]any
			if err := yaml.Unmarshal([]byte(out), &v); err != nil || v["summary"] == nil {
				t.Fatalf("yaml: %v\n%s", err, out)
			}
		case "junit":
			var suites struct {
				Failures int `xml:"failures,attr"`
			}
			if err := xml.Unmarshal([]byte(out), &suites); err != nil || suites.Failures == 0 {
				t.Fatalf("junit: %v\n%s", err, out)
			}
		}
	}
}

// TestEvalBadManifestWritesNoReport: a List whose last item does not parse,
// read from stdin a batch of items at a time, fails the run with exit 2 in
// every output format, and nothing of the report reaches stdout although
// the items before it were evaluated.
func TestEvalBadManifestWritesNoReport(t *testing.T) {
	var in strings.Builder
	in.WriteString(`{"apiVersion": "v1", "kind": "List", "items": [`)
	for i := range 200 {
		fmt.Fprintf(&in, `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p%d", "namespace": "x"}, "spec": {"hostNetwork": true}},`, i)
	}
	in.WriteString("\n{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": oops}}]}\n")
	for _, format := range []string{"table", "json", "yaml", "junit"} {
		out, err := runCLI(t, in.String(), "eval", "--rules", evalRules, "--file", "-", "-o", format)
		if exitCodeOf(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "<stdin>:2") {
			t.Fatalf("%s: exit %d (%v), want %d naming <stdin>:2", format, exitCodeOf(err), err, exitUsage)
		}
		if out != "" {
			t.Fatalf("%s: a failed run wrote %d bytes of report: %.200s", format, len(out), out)
		}
	}
}

// TestEvalRulesAsManifests: a newcomer's --file pointed at a tree of rules
// is told what the files are, in a screenful, not a thousand lines.
func TestEvalRulesAsManifests(t *testing.T) {
	dir := t.TempDir()
	for i := range 25 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("r%02d.yaml", i)), fmt.Sprintf("name: r%02d\nmatch: {gvk: [{kind: Pod}]}\nrule: \"false\"\n", i))
	}
	_, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", dir)
	msg := fmt.Sprint(err)
	if exitCodeOf(err) != exitUsage {
		t.Fatalf("exit %d (%v), want %d", exitCodeOf(err), err, exitUsage)
	}
	for _, want := range []string{
		"r00.yaml:1: object has no apiVersion or kind: this is a plain Portal rule, not a Kubernetes object; rule files go to --rules",
		"r19.yaml:1: ",
		"\n  ... and 5 more",
	} {
		if !strings.Contains(msg, want) {
			t.Fatalf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "r20.yaml") {
		t.Fatalf("more than %d files listed:\n%s", maxManifestErrors, msg)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestEvalNeverPassesOnNothing: a CI step fed by a failed command (empty stdin,
// an empty directory) or pointed at no rules must fail, not report success.
func TestEvalNeverPassesOnNothing(t *testing.T) {
	dir := t.TempDir()
	emptyDir := filepath.Join(dir, "empty")
	if err := os.Mkdir(emptyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n")

	tests := []struct {
		name  string
		stdin string
		args  []string
		code  int
		msg   string
	}{
		{"empty stdin", "", []string{"--rules", evalRules, "--file", "-"}, exitUsage, "no Kubernetes object"},
		{"blank stdin", "\n---\n# nothing\n", []string{"--rules", evalRules, "--file", "-"}, exitUsage, "no Kubernetes object"},
		{"empty directory", "", []string{"--rules", evalRules, "--file", emptyDir}, exitUsage, "no Kubernetes object"},
		{"no rules", "", []string{"--rules", emptyDir, "--file", good}, exitUsage, "no rule found"},
		{"allowed empty stdin", "", []string{"--rules", evalRules, "--file", "-", "--allow-empty"}, exitOK, ""},
		{"allowed no rules", "", []string{"--rules", emptyDir, "--file", good, "--allow-empty"}, exitOK, ""},
		{"missing file", "", []string{"--rules", evalRules, "--file", filepath.Join(dir, "missing.yaml")}, exitUsage, "cannot read --file: stat " + filepath.Join(dir, "missing.yaml") + ": no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runCLI(t, tt.stdin, append([]string{"eval"}, tt.args...)...)
			if code := exitCodeOf(err); code != tt.code {
				t.Fatalf("exit code %d, want %d (%v)", code, tt.code, err)
			}
			if tt.msg != "" && (err == nil || !strings.Contains(err.Error(), tt.msg)) {
				t.Fatalf("error %v does not mention %q", err, tt.msg)
			}
		})
	}
}

// TestEvalDuplicateRules: two rules with one name load as an error naming both
// places; a PortalRule may share its name with a cluster-wide rule.
func TestEvalDuplicateRules(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n")
	rules := filepath.Join(dir, "rules")
	if err := os.Mkdir(rules, 0o700); err != nil {
		t.Fatal(err)
	}
	const rule = "name: same\nmatch: {gvk: [{kind: ConfigMap}]}\nrule: 'false'\n"
	writeFile(t, filepath.Join(rules, "a.yaml"), rule)
	writeFile(t, filepath.Join(rules, "b.yaml"), "# the same name again\n"+rule)
	_, err := runCLI(t, "", "eval", "--rules", rules, "--file", good)
	if code := exitCodeOf(err); code != exitUsage {
		t.Fatalf("exit code %d, want %d (%v)", code, exitUsage, err)
	}
	for _, want := range []string{"b.yaml:2", `rule "same" is already defined at`, "a.yaml:1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}

	scoped := filepath.Join(dir, "scoped")
	if err := os.Mkdir(scoped, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(scoped, "a.yaml"), rule)
	writeFile(t, filepath.Join(scoped, "b.yaml"), `apiVersion: portal.io/v1alpha1
kind: PortalRule
metadata: {name: same, namespace: x}
spec:
  match: {gvk: [{kind: ConfigMap}]}
  rule: 'false'
`)
	if _, err := runCLI(t, "", "eval", "--rules", scoped, "--file", good); err != nil {
		t.Fatalf("a PortalRule sharing a cluster rule's name: %v", err)
	}
}

// TestEvalOverlappingPaths: the same directory twice, or a file and the
// directory holding it, give the results of reading each file once.
func TestEvalOverlappingPaths(t *testing.T) {
	summary := func(args ...string) map[string]int {
		t.Helper()
		out, err := runCLI(t, "", append([]string{"eval", "-o", "json"}, args...)...)
		if exitCodeOf(err) != exitViolation {
			t.Fatalf("%v: %v", args, err)
		}
		var rep struct{ Summary map[string]int }
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Summary
	}
	once := summary("--rules", evalRules, "--file", evalManifests)
	for _, args := range [][]string{
		{"--rules", evalRules + "," + evalRules, "--file", evalManifests},
		{"--rules", evalRules, "--file", evalManifests, "--file", evalManifests},
		{"--rules", evalRules, "--file", filepath.Join(evalManifests, "pods.yaml"), "--file", evalManifests + "/"},
	} {
		if got := summary(args...); !maps.Equal(got, once) {
			t.Errorf("%v: summary %v, want %v as when read once", args, got, once)
		}
	}
}

// TestEvalJobs: --jobs changes nothing a user sees (the same report, byte
// for byte, for every format), a broken manifest among many still leaves no
// report behind whatever the number of workers, and --jobs 0 is a usage error.
func TestEvalJobs(t *testing.T) {
	dir := t.TempDir()
	var many strings.Builder
	pods, err := os.ReadFile(filepath.Join(evalManifests, "pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		many.WriteString("---\n")
		many.Write(pods)
	}
	input := filepath.Join(dir, "many.yaml")
	writeFile(t, input, many.String())
	for _, format := range []string{"table", "json", "yaml", "junit"} {
		one, err1 := runCLI(t, "", "eval", "--rules", evalRules, "--file", input, "-o", format, "--jobs", "1")
		four, err4 := runCLI(t, "", "eval", "--rules", evalRules, "--file", input, "-o", format, "-j", "4")
		if exitCodeOf(err1) != exitViolation || exitCodeOf(err4) != exitViolation {
			t.Fatalf("%s: exit codes %d and %d, want %d", format, exitCodeOf(err1), exitCodeOf(err4), exitViolation)
		}
		if one != four || one == "" {
			t.Fatalf("%s: --jobs 4 wrote a different report than --jobs 1", format)
		}
	}

	broken := filepath.Join(dir, "broken.yaml")
	writeFile(t, broken, many.String()+"---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: [oops\n---\n"+many.String())
	out, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", broken, "-o", "json", "-j", "4")
	if exitCodeOf(err) != exitUsage || out != "" || err == nil || !strings.Contains(err.Error(), "broken.yaml:") {
		t.Fatalf("broken manifest: exit %d, error %v, %d bytes of report", exitCodeOf(err), err, len(out))
	}

	_, err = runCLI(t, "", "eval", "--rules", evalRules, "--file", input, "--jobs", "0")
	if exitCodeOf(err) != exitUsage || !strings.Contains(err.Error(), "--jobs") {
		t.Fatalf("--jobs 0: exit %d, %v", exitCodeOf(err), err)
	}
}

// TestEvalInterrupted: a run stopped by a signal exits 2 without a report,
// never 0 on the part it evaluated.
func TestEvalInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetArgs([]string{"eval", "--rules", evalRules, "--file", evalManifests, "-o", "json"})
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.ExecuteContext(ctx)
	if exitCodeOf(err) != exitUsage || out.Len() != 0 || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("exit %d, error %v, %d bytes of report", exitCodeOf(err), err, out.Len())
	}
}

// TestEvalBudgetFlags: portal eval takes portal run's budget flags, so a CI
// check gives the verdicts of a cluster that sets them: under a tight budget
// a looping rule errors (and, as a deny rule, fails the check); under the
// default it passes.
func TestEvalBudgetFlags(t *testing.T) {
	dir := t.TempDir()
	cm := filepath.Join(dir, "cm.yaml")
	writeFile(t, cm, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n")
	loop := filepath.Join(dir, "loop.yaml")
	writeFile(t, loop, "name: loop\nmatch: {gvk: [{kind: ConfigMap}]}\nrule: 'count(1..1000, # > 0) == 0'\n")
	if out, err := runCLI(t, "", "eval", "-r", loop, "-f", cm); err != nil {
		t.Fatalf("default budget: %v\n%s", err, out)
	}
	out, err := runCLI(t, "", "eval", "-r", loop, "-f", cm, "--rule-max-operations", "100", "-o", "json")
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("--rule-max-operations 100: exit %d, want %d (%v)", code, exitViolation, err)
	}
	if !strings.Contains(out, "evaluation budget exceeded") {
		t.Errorf("no budget error in the report:\n%s", out)
	}
	if _, err := runCLI(t, "", "eval", "-r", loop, "-f", cm, "--rule-max-bytes", "0"); exitCodeOf(err) != exitUsage {
		t.Errorf("--rule-max-bytes 0: %v, want a usage error", err)
	}
}

// TestEvalWarnsWhenARuleMatchesNothing: a rule whose match selects nothing
// in the input (a kind the input lacks, a namespace it does not have) made
// `0 passed, 0 failed` and exit 0, which reads as success; it now says so
// on standard error, and only for that rule.
func TestEvalWarnsWhenARuleMatchesNothing(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	writeFile(t, rules, `name: namespace-owner
match: {gvk: [{group: "", version: v1, kind: Namespace}]}
rule: '!("owner" in object.metadata.labels)'
---
name: config-map-label
match: {gvk: [{group: "", version: v1, kind: ConfigMap}]}
rule: '!("app" in metadata.labels)'
`)
	cm := filepath.Join(dir, "cm.yaml")
	writeFile(t, cm, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x, labels: {app: a}}\n")
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetArgs([]string{"eval", "--rules", rules, "--file", cm})
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	want := `portal eval: warning: rule "namespace-owner" matched no object in --file: check its match (gvk, namespaces, labelSelector) against the input`
	if got := strings.TrimSpace(errOut.String()); got != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(out.String(), "1 passed, 0 failed, 0 errors") {
		t.Errorf("stdout: %s", out.String())
	}
}

// TestEvalReportIntoAFile: standard output redirected to a file, as CI
// does, gets the report written into it as the run goes; it reads as the
// report written at the end, and a run that fails leaves the file as
// empty as it found it, in both formats written in place.
func TestEvalReportIntoAFile(t *testing.T) {
	var good, bad strings.Builder
	for i := range 300 {
		fmt.Fprintf(&good, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p%d, namespace: x}\nspec: {hostNetwork: %v}\n", i, i%7 == 0)
	}
	bad.WriteString(good.String())
	bad.WriteString("---\napiVersion: v1\nkind: Pod\nmetadata: {name: [oops}\n")
	for _, format := range []string{"json", "yaml"} {
		want, _ := runCLI(t, good.String(), "eval", "--rules", evalRules, "--file", "-", "-o", format)
		got, err := runCLIToFile(t, good.String(), "eval", "--rules", evalRules, "--file", "-", "-o", format)
		if exitCodeOf(err) != exitViolation || got != want {
			t.Fatalf("%s: exit %d (%v), the file holds %d bytes, want exit %d and the %d bytes written to a buffer:\n%.300s",
				format, exitCodeOf(err), err, len(got), exitViolation, len(want), got)
		}
		got, err = runCLIToFile(t, bad.String(), "eval", "--rules", evalRules, "--file", "-", "-o", format)
		if exitCodeOf(err) != exitUsage || got != "" {
			t.Fatalf("%s: a failed run: exit %d (%v), the file holds %d bytes of report: %.200s", format, exitCodeOf(err), err, len(got), got)
		}
	}
	// Standard error into the same file: warnings would land inside the
	// report, so the report waits for the end.
	f, err := os.Create(filepath.Join(t.TempDir(), "both"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if reportFile(f, f) != nil || reportFile(f, io.Discard) != f {
		t.Fatal("a report file shared with standard error is written in place, or one that is not is not")
	}
}

// runCLIToFile is runCLI with standard output a file, returning what the
// file holds after.
func runCLIToFile(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "report"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := newRootCommand()
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(f)
	cmd.SetErr(io.Discard)
	runErr := cmd.Execute()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b), runErr
}

// TestEvalShowPasses: --show-passes=false leaves the passes out of a JSON
// report and still counts them; --show-passes lists them in the table.
func TestEvalShowPasses(t *testing.T) {
	out, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", evalManifests, "-o", "json", "--show-passes=false")
	var rep struct {
		Results []struct{ Result string }
		Summary struct{ Pass, Fail int }
	}
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil || exitCodeOf(err) != exitViolation {
		t.Fatalf("exit %d (%v), report %v:\n%.300s", exitCodeOf(err), err, jerr, out)
	}
	for _, r := range rep.Results {
		if r.Result == "pass" {
			t.Fatal("--show-passes=false listed a pass")
		}
	}
	if rep.Summary.Pass == 0 || len(rep.Results) != rep.Summary.Fail {
		t.Fatalf("summary %+v with %d results, want the passes counted and every failure listed", rep.Summary, len(rep.Results))
	}
	table, _ := runCLI(t, "", "eval", "--rules", evalRules, "--file", evalManifests, "--show-passes")
	if n := strings.Count(table, "\nPASS "); n != rep.Summary.Pass {
		t.Fatalf("--show-passes: %d PASS rows, want %d:\n%s", n, rep.Summary.Pass, table)
	}
}

// TestEvalReportIntoOneOfItsInputs: standard output redirected to a file
// that --file also reads (`portal eval --file . -o json > report.json`, the
// report beside the manifests) is not written as the run goes: the walk
// would read back the report's first results as a manifest and fail the
// run, where a report written at the end finds the file as empty as the
// shell left it. So does the second read of --network.
func TestEvalReportIntoOneOfItsInputs(t *testing.T) {
	var pods strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&pods, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p%d, namespace: x}\nspec: {hostNetwork: %v, containers: [{name: c, image: i}]}\n", i, i%7 == 0)
	}
	for _, format := range []string{"json", "yaml"} {
		for _, network := range []string{"", "--file", "--cluster-state"} {
			dir, state := t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "pods.yaml"), []byte(pods.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			// The report sorts after the manifests, as a walk reads them.
			path := filepath.Join(dir, "report."+format)
			args := []string{"eval", "--rules", evalRules, "--file", dir, "-o", format, "--jobs", "1"}
			switch network {
			case "--file":
				args = append(args, "--network")
			case "--cluster-state":
				// Read once before the run, and again by --network after.
				path = filepath.Join(state, "report."+format)
				args = append(args, "--network", "--cluster-state", state)
			}
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			want, wantErr := runCLI(t, "", args...)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			cmd := newRootCommand()
			cmd.SetArgs(args)
			cmd.SetOut(f)
			cmd.SetErr(io.Discard)
			runErr := cmd.Execute()
			f.Close()
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if exitCodeOf(runErr) != exitCodeOf(wantErr) || string(got) != want {
				t.Fatalf("%s, report in the --network read of %q: exit %d (%v), the file holds %d bytes; want exit %d and the %d bytes written to a buffer",
					format, network, exitCodeOf(runErr), runErr, len(got), exitCodeOf(wantErr), len(want))
			}
		}
	}
}

// TestEvalReportAppendedToAnEmptyFile: standard output opened for appending
// (`>> log`) is not written as the run goes even when the file is empty:
// another writer appending to it meanwhile would land inside the report,
// and a run that fails would cut its lines away with the report's. Written
// at the end, the report follows them and a failed run leaves them.
func TestEvalReportAppendedToAnEmptyFile(t *testing.T) {
	var pods strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&pods, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p%d, namespace: x}\nspec: {hostNetwork: %v, containers: [{name: c, image: i}]}\n", i, i%7 == 0)
	}
	path := filepath.Join(t.TempDir(), "log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	in, feed := io.Pipe()
	go func() {
		// Each Write returns once the run has read it: the report has
		// begun when the other writer appends its line.
		_, _ = io.WriteString(feed, pods.String())
		_, _ = io.WriteString(other, "another writer's line\n")
		_, _ = io.WriteString(feed, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: [oops}\n")
		feed.Close()
	}()
	cmd := newRootCommand()
	cmd.SetArgs([]string{"eval", "--rules", evalRules, "--file", "-", "-o", "json", "--jobs", "1"})
	cmd.SetIn(in)
	cmd.SetOut(f)
	cmd.SetErr(io.Discard)
	runErr := cmd.Execute()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if exitCodeOf(runErr) != exitUsage || string(got) != "another writer's line\n" {
		t.Fatalf("exit %d (%v); the file holds %d bytes, want only the other writer's line: %.200q", exitCodeOf(runErr), runErr, len(got), got)
	}
}
