package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// tenantBinder binds a name no other part of Portal knows: the rule
// engine and the expression engine learn it from the binder alone.
type tenantBinder struct{}

func (tenantBinder) Name() string { return "tenant" }

func (tenantBinder) Bind(_ context.Context, _ *engine.Rule, obj *unstructured.Unstructured, _ engine.Options) any {
	return map[string]any{"name": obj.GetNamespace()}
}

// TestRegisteredBinderNameIsKnown: a rule reads a binder's name as soon as
// the binder is registered, with nothing else to change.
func TestRegisteredBinderNameIsKnown(t *testing.T) {
	e := engine.New(exprlang.New(), engine.WithBinder(tenantBinder{}))
	if names := e.Names(); !slices.Contains(names, "tenant") {
		t.Fatalf("Names() = %v, want the registered binder's name tenant", names)
	}
	r := newRule("tenant", `tenant.name == "prod"`)
	c, err := e.Compile(r)
	if err != nil {
		t.Fatalf("a rule reading the binder's name: %v", err)
	}
	e.SetRules([]*engine.Rule{c})
	if res := evaluate(t, e, obj(t, twoBadContainers)); len(res) != 1 || res[0].Outcome != core.OutcomeFail {
		t.Fatalf("the rule must see the bound value (namespace prod): %+v", res)
	}
	// Without the binder the name is unknown: a typo, not a nil.
	if _, err := engine.New(exprlang.New()).Compile(r); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("without the binder: %v, want a compile error naming tenant", err)
	}
}

// TestNamesOfTheDefaultEngine keeps the names a rule can read as they
// were when the expression language listed them itself, plus event (the
// runtime event, bound for rules of mode runtime only), and cluster
// compiles without a lookup binder (it fails when it runs, saying lookups
// are not available there).
func TestNamesOfTheDefaultEngine(t *testing.T) {
	e := engine.New(exprlang.New())
	want := []string{"container", "event", "metadata", "object", "pod", "request", "securityContext", "spec"}
	if got := e.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	c, err := e.Compile(newRule("lookup", `cluster.services.byName("a", "b") == nil`))
	if err != nil {
		t.Fatalf("a lookup without a binder must compile: %v", err)
	}
	e.SetRules([]*engine.Rule{c})
	res := evaluate(t, e, obj(t, twoBadContainers))
	if len(res) != 1 || res[0].Outcome != core.OutcomeError || !strings.Contains(res[0].Message, "not available here") {
		t.Fatalf("got %+v, want an error saying lookups are not available here", res)
	}
}
