package examples_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

// libraryBundles are the bundles of the rule library (docs/library.md)
// whose rules each have a test file, testdata/<rule>/portal-test.yaml.
var libraryBundles = []string{bestPracticesDir, "rules/other"}

// ruleTest is a rule test file (docs/reference/test-file.md), the part of
// its schema the library's files use.
type ruleTest struct {
	Name      string   `json:"name"`
	Rules     []string `json:"rules"`
	Resources []string `json:"resources"`
	Results   []struct {
		Rule      string `json:"rule"`
		Resource  string `json:"resource"`
		Container string `json:"container,omitempty"`
		Result    string `json:"result"`
		Message   string `json:"message,omitempty"`
	} `json:"results"`
}

// TestLibraryTestFiles checks the library's test files the way `portal
// test` runs them, so they hold before and beside that command: every rule
// of the "other" bundle has one, each names its rule and asserts both a
// passing and a failing resource, and every expectation is what the engine
// decides (a failure of a warn rule is "warn").
func TestLibraryTestFiles(t *testing.T) {
	for _, bundle := range libraryBundles {
		files, err := filepath.Glob(filepath.Join(bundle, "testdata", "*", "portal-test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			t.Run(filepath.ToSlash(f), func(t *testing.T) { checkRuleTest(t, f) })
		}
	}
	rules, err := filepath.Glob(filepath.Join("rules/other", "*.yaml"))
	if err != nil || len(rules) < 25 {
		t.Fatalf("rules/other holds %d rule files (%v), want at least 25", len(rules), err)
	}
	for _, r := range rules {
		name := strings.TrimSuffix(filepath.Base(r), ".yaml")
		if _, err := os.Stat(filepath.Join("rules/other", "testdata", name, "portal-test.yaml")); err != nil {
			t.Errorf("%s has no test file: %v", r, err)
		}
	}
}

func checkRuleTest(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rt ruleTest
	if err := yaml.UnmarshalStrict(data, &rt); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	dir := filepath.Dir(path)
	var rulePaths []string
	for _, r := range rt.Rules {
		rulePaths = append(rulePaths, filepath.Join(dir, r))
	}
	eng := engine.New(exprlang.New())
	loaded, errs := rule.LoadPaths(eng, rulePaths)
	for _, err := range errs {
		t.Fatalf("load rules: %v", err)
	}
	eng.SetRules(loaded)

	got := map[string][]string{} // rule|resource|container -> results
	for _, res := range rt.Resources {
		p := filepath.Join(dir, res)
		for _, r := range evaluateFile(t, eng, p) {
			got[expectationKey(r.Rule.Name, resourceRef(r.Resource), r.Container)] = append(got[expectationKey(r.Rule.Name, resourceRef(r.Resource), r.Container)], testResult(r))
		}
	}
	sides := map[string]bool{}
	for _, want := range rt.Results {
		sides[want.Result] = true
		k := expectationKey(want.Rule, want.Resource, want.Container)
		if rs := got[k]; len(rs) != 1 || rs[0] != want.Result {
			t.Errorf("%s on %s %s: want %s, got %v", want.Rule, want.Resource, want.Container, want.Result, rs)
		}
	}
	if rt.Name == "" || !sides["pass"] || !(sides["fail"] || sides["warn"]) {
		t.Errorf("%s: want a name and both a passing and a failing expectation, got %q and %v", path, rt.Name, sides)
	}
}

// evaluateFile runs every rule of eng on each object of the manifest file.
func evaluateFile(t *testing.T, eng *engine.Engine, path string) []core.Result {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []core.Result
	for _, d := range manifest.Split(path, data) {
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

func expectationKey(rule, resource, container string) string {
	return rule + "|" + resource + "|" + container
}

// resourceRef is a resource as a test file names it: Kind/namespace/name,
// or Kind/name when cluster-scoped.
func resourceRef(r core.ResourceRef) string {
	if r.Namespace == "" {
		return r.Kind + "/" + r.Name
	}
	return fmt.Sprintf("%s/%s/%s", r.Kind, r.Namespace, r.Name)
}

// testResult is a result as a test file names it: a failure of a warn rule
// is warn.
func testResult(r core.Result) string {
	if r.Outcome == core.OutcomeFail && r.Rule.EnforcementAction == core.ActionWarn {
		return "warn"
	}
	return string(r.Outcome)
}

// libraryHeadroom is how far below the default budget the "other" bundle
// stays: a twentieth, not the hundredth of the shipped bundles, because
// disallow-secrets-from-env-vars must read every environment variable
// (2,750 on the pod below, about 14,000 operations).
const libraryHeadroom = 20

// TestLibraryStaysFarBelowBudget: the "other" bundle runs with a twentieth
// of the default budget on its fixtures and on a pod of 50 containers of 50
// environment variables each, without an error.
func TestLibraryStaysFarBelowBudget(t *testing.T) {
	eng := engine.New(exprlang.New(exprlang.WithLimits(exprlang.Limits{
		Operations: exprlang.DefaultOperations / libraryHeadroom,
		Bytes:      exprlang.DefaultBytes / libraryHeadroom,
	})))
	rules, errs := rule.LoadPaths(eng, []string{"rules/other"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	eng.SetRules(rules)
	files, _ := filepath.Glob(filepath.Join("rules/other", "testdata", "*", "*.yaml"))
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "portal-test.yaml" })
	if len(files) < 50 {
		t.Fatalf("found %d fixture files", len(files))
	}
	var results []core.Result
	for _, f := range files {
		results = append(results, evaluateFile(t, eng, f)...)
	}
	big, err := eng.Evaluate(context.Background(), bigPod(50, 50), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	results = append(results, big...)
	for _, r := range results {
		if r.Outcome == core.OutcomeError {
			t.Errorf("%s errored on %s %s: %v", r.Rule.Name, r.Resource.Kind, r.Resource.Name, r.Err)
		}
	}
}

// TestEphemeralContainerRefusedOnlyWhenAdded: at admission,
// block-ephemeral-containers refuses the update that adds an ephemeral
// container (kubectl debug), not a later update of a pod that already has
// one, which would otherwise be stuck: no label, no annotation, not even
// Portal's own actions could change it.
func TestEphemeralContainerRefusedOnlyWhenAdded(t *testing.T) {
	eng := engine.New(exprlang.New())
	rules, errs := rule.LoadPaths(eng, []string{"rules/other/block-ephemeral-containers.yaml"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	eng.SetRules(rules)
	pod := func(ephemeral ...string) map[string]any {
		spec := map[string]any{"containers": []any{map[string]any{"name": "web", "image": "ghcr.io/your-org/web:3.2.0"}}}
		var ecs []any
		for _, n := range ephemeral {
			ecs = append(ecs, map[string]any{"name": n, "image": "docker.io/library/busybox:1.37"})
		}
		if ecs != nil {
			spec["ephemeralContainers"] = ecs
		}
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "web", "namespace": "shop"}, "spec": spec}
	}
	for _, tc := range []struct {
		name     string
		old, new map[string]any
		want     core.Outcome
	}{
		{"adding one", pod(), pod("debugger"), core.OutcomeFail},
		{"adding a second", pod("debugger"), pod("debugger", "again"), core.OutcomeFail},
		{"updating a pod that has one", pod("debugger"), pod("debugger"), core.OutcomePass},
	} {
		res, err := eng.Evaluate(context.Background(), &unstructured.Unstructured{Object: tc.new},
			engine.Options{Mode: core.ModeAdmission, Request: &core.Request{Operation: "UPDATE", OldObject: tc.old}})
		if err != nil {
			t.Fatal(err)
		}
		got := core.OutcomePass
		for _, r := range res {
			if r.Outcome != core.OutcomePass {
				got = r.Outcome
			}
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s (%v)", tc.name, got, tc.want, res)
		}
	}
}
