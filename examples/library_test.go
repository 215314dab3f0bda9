package examples_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// libraryHeadroom is how far below the default budget the "other" bundle
// stays: a twentieth, not the hundredth of the shipped bundles, because
// disallow-secrets-from-env-vars must read every environment variable
// (2,750 on the pod below, about 14,000 operations).
const libraryHeadroom = 20

// TestLibraryStaysFarBelowBudget: the "other" bundle runs with a twentieth
// of the default budget on its fixtures and on a pod of 50 containers of 50
// environment variables each, without an error.
func TestLibraryStaysFarBelowBudget(t *testing.T) {
	for _, r := range underBudget(t, libraryHeadroom, []string{"rules/other"}, 50) {
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
