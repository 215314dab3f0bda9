package engine

import "k8s.io/apimachinery/pkg/runtime/schema"

// scoped indexes rules and exceptions by the kinds they match and, for
// those a namespace owns (a PortalRule, a PortalException, which only ever
// apply to objects of their own namespace), by that namespace too. An
// object's evaluation then walks the cluster-scoped entries of its kind and
// its own namespace's, never another tenant's: a tenant with ten thousand
// PortalRules slows only its own namespace's evaluations.
type scoped[T any] struct {
	byGK map[schema.GroupKind]*kindIndex[T]
}

type kindIndex[T any] struct {
	cluster list[T]
	byNS    map[string]*list[T]
}

// list holds items with their positions in the set they came from, so the
// two lists an object sees merge back into that order: rules' results and
// the exception that exempts are the same whatever the index.
type list[T any] struct {
	items []T
	pos   []int
}

func (l *list[T]) add(pos int, v T) {
	// An item that matches several versions of one kind comes once.
	if n := len(l.pos); n > 0 && l.pos[n-1] == pos {
		return
	}
	l.items, l.pos = append(l.items, v), append(l.pos, pos)
}

func newScoped[T any]() *scoped[T] {
	return &scoped[T]{byGK: map[schema.GroupKind]*kindIndex[T]{}}
}

// add files v, the pos-th item of its set (added in increasing pos), under
// gk and namespace ("" for an item that applies in every namespace).
func (s *scoped[T]) add(gk schema.GroupKind, namespace string, pos int, v T) {
	k := s.byGK[gk]
	if k == nil {
		k = &kindIndex[T]{byNS: map[string]*list[T]{}}
		s.byGK[gk] = k
	}
	if namespace == "" {
		k.cluster.add(pos, v)
		return
	}
	l := k.byNS[namespace]
	if l == nil {
		l = &list[T]{}
		k.byNS[namespace] = l
	}
	l.add(pos, v)
}

// candidates returns, in set order, the items of kind gk that may apply to
// an object in namespace (a cluster-scoped object: ""). It allocates only
// when both the cluster's and the namespace's lists hold items.
func (s *scoped[T]) candidates(gk schema.GroupKind, namespace string) []T {
	k := s.byGK[gk]
	if k == nil {
		return nil
	}
	a := &k.cluster
	b := k.byNS[namespace]
	switch {
	case namespace == "" || b == nil:
		return a.items
	case len(a.items) == 0:
		return b.items
	}
	out := make([]T, 0, len(a.items)+len(b.items))
	i, j := 0, 0
	for i < len(a.items) && j < len(b.items) {
		if a.pos[i] < b.pos[j] {
			out, i = append(out, a.items[i]), i+1
		} else {
			out, j = append(out, b.items[j]), j+1
		}
	}
	out = append(out, a.items[i:]...)
	return append(out, b.items[j:]...)
}
