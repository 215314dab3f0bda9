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
	eng := engine.New(exprlang.New(exprlang.WithLimits(exprlang.Limits{
		Operations: exprlang.DefaultOperations / headroom,
		Bytes:      exprlang.DefaultBytes / headroom,
	})))
	rules, errs := rule.LoadPaths(eng, []string{bestPracticesDir, podSecurityDir})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	eng.SetRules(rules)
	files, _ := filepath.Glob(filepath.Join(bestPracticesDir, "testdata", "*", "*.yaml"))
	// The test files beside the fixtures are not manifests.
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == ruletest.FileName })
	more, _ := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	files = append(files, more...)
	if len(files) < 20 {
		t.Fatalf("found %d fixture files", len(files))
	}
	var results []core.Result
	for _, f := range files {
		results = append(results, evaluate(t, eng, f)...)
	}
	big, err := eng.Evaluate(context.Background(), bigPod(50, 50), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	results = append(results, big...)
	for _, r := range results {
		if errors.Is(r.Err, core.ErrBudgetExceeded) {
			t.Errorf("%s: %s", r.Rule.Name, describe(r))
		}
	}
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
