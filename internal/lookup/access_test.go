package lookup_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/lookup"
)

// countingAccess allows every watch and counts the checks, each of which
// is two SubjectAccessReviews against a real API server.
type countingAccess struct{ n atomic.Int64 }

func (c *countingAccess) CanWatch(context.Context, schema.GroupVersionResource, string) (bool, string, error) {
	c.n.Add(1)
	return true, "", nil
}

// TestWatcherChecksEachWatchOnce: a tenant's hundred rules, each reading
// the same two resources of its namespace, cost Portal one permission
// check per resource, not one per lookup, and a further rule change reuses
// them.
func TestWatcherChecksEachWatchOnce(t *testing.T) {
	mem := memory(t)
	l := lookup.New(lookup.Options{Cache: mem, Resolver: mem.(lookup.Resolver)})
	var rules []*core.Rule
	for i := range 100 {
		rules = append(rules, rule(fmt.Sprintf("r%d", i), "a",
			`cluster.services.list("a", {}) == nil && cluster.configmaps.byName("a", "x") == nil`, deployGVK))
	}
	e := newEngine(t, l, rules...)
	access := &countingAccess{}
	w := lookup.NewWatcher(lookup.WatcherOptions{Engine: e, Cache: mem, Resolver: mem.(lookup.Resolver), Access: access})
	w.RulesChanged(context.Background())
	if n := access.n.Load(); n != 2 {
		t.Fatalf("%d permission checks for 100 rules reading services and configmaps of one namespace, want 2", n)
	}
	w.RulesChanged(context.Background())
	if n := access.n.Load(); n != 2 {
		t.Errorf("%d permission checks after a second rule change, want the first 2 reused", n)
	}
	if st, ok := w.Status(lookup.RuleKey{Kind: "PortalRule", Namespace: "a", Name: "r99"}); !ok || st.Reason != lookup.ReasonLookupsReady {
		t.Errorf("r99: %+v %v, want %s", st, ok, lookup.ReasonLookupsReady)
	}
}

// TestWatcherStatusByObjectName: the lookup status of a rule object whose
// spec.name differs from its metadata.name is found by the object's name,
// the one the status writer asks for.
func TestWatcherStatusByObjectName(t *testing.T) {
	mem := memory(t)
	l := lookup.New(lookup.Options{Cache: mem, Resolver: mem.(lookup.Resolver)})
	r := rule("display-name", "a", `cluster.services.list("a", {}) == nil`, deployGVK)
	r.Source.Name = "object-name"
	e := newEngine(t, l, r)
	w := lookup.NewWatcher(lookup.WatcherOptions{Engine: e, Cache: mem, Resolver: mem.(lookup.Resolver), Access: denyAll{}})
	w.RulesChanged(context.Background())
	st, ok := w.Status(lookup.RuleKey{Kind: "PortalRule", Namespace: "a", Name: "object-name"})
	if !ok || st.Reason != lookup.ReasonLookupForbidden {
		t.Errorf("status of PortalRule a/object-name: %+v %v, want %s", st, ok, lookup.ReasonLookupForbidden)
	}
}
