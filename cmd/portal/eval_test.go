package main

import (
	"encoding/json"
	"encoding/xml"
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
		{"bad rule", []string{"--rules", badRule, "--file", good}, exitUsage, "rule.yaml:1"},
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

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
