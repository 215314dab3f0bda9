package lookup_test

import (
	"context"
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/lookup"
)

// TestRuntimeReadsAreNotRecorded: a runtime rule's lookups read the cache
// as audit's do, but a runtime event is evaluated once and never again, so
// its reads are not recorded in the dependency index: a flood of events
// cannot evict audit's dependencies from it.
func TestRuntimeReadsAreNotRecorded(t *testing.T) {
	mem := memory(t, depA, webA)
	index := lookup.NewDepIndex(0)
	l := lookup.New(lookup.Options{Cache: mem, Resolver: mem.(lookup.Resolver), Index: index})
	r := rule("pdb", "", `len(cluster.services.list(object.metadata.namespace, {})) > 0`, deployGVK)
	r.Modes, r.Runtime = []core.Mode{core.ModeRuntime}, core.RuntimeMatch{Events: []string{"any"}}
	e := newEngine(t, l, r)
	for _, obj := range objs(t, depA) {
		res, err := e.Evaluate(context.Background(), obj, engine.Options{Mode: core.ModeRuntime, RuntimeEvents: []string{"any"}})
		if err != nil || len(res) != 1 || res[0].Outcome != core.OutcomeFail {
			t.Fatalf("the runtime rule did not read the Service: %+v %v", res, err)
		}
	}
	if n := index.Len(); n != 0 {
		t.Errorf("the dependency index holds %d entries after a runtime evaluation, want 0", n)
	}
}
