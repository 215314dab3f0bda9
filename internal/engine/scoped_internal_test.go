package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestScopedIndexWalksOnlyTheObjectsNamespace: an object sees the
// cluster-wide items of its kind and its own namespace's, in the order of
// the set, and never another namespace's; a cluster-scoped object sees only
// cluster-wide items. Checked against a plain filter of the set over random
// sets.
func TestScopedIndexWalksOnlyTheObjectsNamespace(t *testing.T) {
	type item struct {
		ns   string
		kind string
	}
	pod, cm := schema.GroupKind{Kind: "Pod"}, schema.GroupKind{Kind: "ConfigMap"}
	namespaces := []string{"", "", "a", "b", "c"}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var set []item
		idx := newScoped[int]()
		for i := range rng.IntN(40) {
			it := item{ns: namespaces[rng.IntN(len(namespaces))], kind: []string{"Pod", "ConfigMap"}[rng.IntN(2)]}
			set = append(set, it)
			idx.add(schema.GroupKind{Kind: it.kind}, it.ns, i, i)
			if rng.IntN(3) == 0 { // a second version of the same kind
				idx.add(schema.GroupKind{Kind: it.kind}, it.ns, i, i)
			}
		}
		for _, gk := range []schema.GroupKind{pod, cm} {
			for _, ns := range []string{"", "a", "b", "z"} {
				var want []int
				for i, it := range set {
					if it.kind == gk.Kind && (it.ns == "" || (ns != "" && it.ns == ns)) {
						want = append(want, i)
					}
				}
				if got := idx.candidates(gk, ns); !slices.Equal(got, want) {
					t.Fatalf("round %d: candidates(%s, %q) = %v, want %v (set %v)", round, gk.Kind, ns, got, want, set)
				}
			}
		}
	}
}

// TestAnotherTenantsRulesAreNotCandidates: ten thousand PortalRules of one
// namespace are not walked for a pod of another.
func TestAnotherTenantsRulesAreNotCandidates(t *testing.T) {
	idx := newScoped[string]()
	idx.add(schema.GroupKind{Kind: "Pod"}, "", 0, "cluster")
	for i := range 10000 {
		idx.add(schema.GroupKind{Kind: "Pod"}, "flood", i+1, fmt.Sprint("flood-", i))
	}
	if got := idx.candidates(schema.GroupKind{Kind: "Pod"}, "quiet"); !slices.Equal(got, []string{"cluster"}) {
		t.Fatalf("a pod in quiet walks %d rules, want only the cluster rule", len(got))
	}
	if got := idx.candidates(schema.GroupKind{Kind: "Pod"}, "flood"); len(got) != 10001 {
		t.Fatalf("a pod in flood walks %d rules, want 10001", len(got))
	}
}
