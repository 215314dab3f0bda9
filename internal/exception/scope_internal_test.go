package exception

import (
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// TestChangesReachOnlyTheirNamespace: a PortalException's change re-queues
// the objects of its own namespace only, so a tenant editing one in a loop
// cannot keep audit busy re-evaluating every namespace; a
// PortalClusterException's reaches every namespace.
func TestChangesReachOnlyTheirNamespace(t *testing.T) {
	x := func(ns string) *engine.Exception {
		return &engine.Exception{Exception: &core.Exception{Namespace: ns, Name: "x"}}
	}
	for _, tc := range []struct {
		xs   []*engine.Exception
		want string
	}{
		{[]*engine.Exception{x("billing")}, "billing"},
		{[]*engine.Exception{nil, x("billing")}, "billing"},
		{[]*engine.Exception{x("billing"), x("billing")}, "billing"},
		{[]*engine.Exception{x("")}, ""},
		{[]*engine.Exception{x("billing"), x("")}, ""},
	} {
		if got := scope(tc.xs...); got != tc.want {
			t.Errorf("scope of %d exceptions = %q, want %q", len(tc.xs), got, tc.want)
		}
	}
}
