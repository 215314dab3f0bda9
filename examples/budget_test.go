package examples_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval/ruletest"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// headroom is how far below the default budget every shipped rule must
// stay: they run here with a hundredth of it.
const headroom = 100

// TestShippedRulesStayFarBelowBudget runs every shipped rule, with a
// hundredth of the default budget, on every fixture and manifest and on a
// pod with 50 containers of 50 environment variables each: none may run out.
func TestShippedRulesStayFarBelowBudget(t *testing.T) {
	more, _ := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	for _, r := range underBudget(t, headroom, []string{bestPracticesDir, podSecurityDir}, 20, more...) {
		if errors.Is(r.Err, core.ErrBudgetExceeded) {
			t.Errorf("%s: %s", r.Rule.Name, describe(r))
		}
	}
}

// underBudget runs the rules of bundles, with the default budget divided by
// div, on their fixtures (testdata/*/*.yaml but the test files), the files
// in more and a pod of 50 containers of 50 environment variables, and
// returns the results; it fails when fewer than minFiles files were read.
func underBudget(t *testing.T, div int64, bundles []string, minFiles int, more ...string) []core.Result {
	t.Helper()
	eng := engine.New(exprlang.New(exprlang.WithLimits(exprlang.Limits{
		Operations: exprlang.DefaultOperations / div,
		Bytes:      exprlang.DefaultBytes / div,
	})))
	rules, errs := rule.LoadPaths(eng, bundles)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	eng.SetRules(rules)
	var files []string
	for _, b := range bundles {
		fixtures, _ := filepath.Glob(filepath.Join(b, "testdata", "*", "*.yaml"))
		// The test files beside the fixtures are not manifests.
		files = append(files, slices.DeleteFunc(fixtures, func(f string) bool { return filepath.Base(f) == ruletest.FileName })...)
	}
	files = append(files, more...)
	if len(files) < minFiles {
		t.Fatalf("found %d fixture files, want at least %d", len(files), minFiles)
	}
	var results []core.Result
	for _, f := range files {
		results = append(results, evaluate(t, eng, f)...)
	}
	big, err := eng.Evaluate(context.Background(), bigPod(50, 50), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return append(results, big...)
}

func bigPod(containers, envs int) *unstructured.Unstructured {
	cs := make([]any, containers)
	for i := range cs {
		env := make([]any, envs)
		for j := range env {
			env[j] = map[string]any{"name": fmt.Sprintf("VAR_%d", j), "value": "some value of moderate length"}
		}
		cs[i] = map[string]any{
			"name": fmt.Sprintf("c%d", i), "image": "registry.example.com/team/app:1.2.3", "env": env,
			"ports":     []any{map[string]any{"containerPort": int64(8080), "hostPort": int64(0)}},
			"resources": map[string]any{"limits": map[string]any{"cpu": "500m", "memory": "512Mi"}},
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "big", "namespace": "team", "labels": map[string]any{"app": "big"}},
		"spec":     map[string]any{"containers": cs, "initContainers": cs[:5]},
	}}
}
