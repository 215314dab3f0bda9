package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

const (
	excRule = `name: no-privileged
match: {gvk: [{kind: Pod}]}
rule: container.securityContext.privileged == true
message: privileged
`
	excPods = `apiVersion: v1
kind: Pod
metadata: {name: legacy-a, namespace: billing}
spec: {containers: [{name: app, image: x, securityContext: {privileged: true}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: legacy-a, namespace: shop}
spec: {containers: [{name: app, image: x, securityContext: {privileged: true}}]}
`
	excException = `apiVersion: portal.io/v1alpha1
kind: PortalException
metadata: {name: legacy-billing, namespace: billing}
spec:
  rules: [no-privileged]
  match: {gvk: [{group: "", version: v1, kind: Pod}], names: ["legacy-*"]}
  reason: vendor image needs privileged
`
)

// TestEvalExceptions: --exceptions reports the exempted pod as skip, naming
// the exception, and the same pod in another namespace as fail; with only
// the exempted pod, nothing denies and the exit status is 0. An exception
// file with a field the schema lacks, or of another kind, does not load.
func TestEvalExceptions(t *testing.T) {
	dir := t.TempDir()
	rule, pods, exc := filepath.Join(dir, "rule.yaml"), filepath.Join(dir, "pods.yaml"), filepath.Join(dir, "exc.yaml")
	writeFile(t, rule, excRule)
	writeFile(t, pods, excPods)
	writeFile(t, exc, excException)

	out, err := runCLI(t, "", "eval", "--rules", rule, "--file", pods, "--exceptions", exc, "-o", "json")
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("exit %d, want %d: %v", code, exitViolation, err)
	}
	var rep struct {
		Results []struct {
			Resource  struct{ Namespace string }
			Result    string
			Exception string
		}
		Summary struct{ Fail, Skip int }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]string{}
	for _, r := range rep.Results {
		got[r.Resource.Namespace] = r.Result + " " + r.Exception
	}
	if got["billing"] != "skip PortalException billing/legacy-billing" || got["shop"] != "fail " || rep.Summary.Skip != 1 || rep.Summary.Fail != 1 {
		t.Fatalf("results %v, summary %+v", got, rep.Summary)
	}

	only := filepath.Join(dir, "billing.yaml")
	writeFile(t, only, strings.SplitN(excPods, "---\n", 2)[0])
	if _, err := runCLI(t, "", "eval", "--rules", rule, "--file", only, "--exceptions", exc); exitCodeOf(err) != 0 {
		t.Fatalf("only exempted objects: exit %d, want 0: %v", exitCodeOf(err), err)
	}

	for name, body := range map[string]string{
		"unknown field": strings.Replace(excException, "reason:", "reasn: x\n  reason:", 1),
		"another kind":  excRule,
		"no namespace":  strings.Replace(excException, ", namespace: billing", "", 1),
	} {
		bad := filepath.Join(dir, "bad.yaml")
		writeFile(t, bad, body)
		if _, err := runCLI(t, "", "eval", "--rules", rule, "--file", pods, "--exceptions", bad); exitCodeOf(err) != exitUsage {
			t.Errorf("%s: exit %d, want %d: %v", name, exitCodeOf(err), exitUsage, err)
		}
	}
}
