package reuse

import (
	"fmt"
	"testing"
)

// TestPoolIsBounded: whatever a tree holds, a Pool keeps at most maxKept
// maps and lists, none larger than it takes.
func TestPoolIsBounded(t *testing.T) {
	big := map[string]any{}
	for i := range maxMap + 1 {
		big[fmt.Sprint(i)] = i
	}
	tree := []any{big, make([]any, 0, maxList+1)}
	for i := range 10 * maxKept {
		tree = append(tree, map[string]any{"i": i}, []any{i})
	}
	var p Pool
	p.Release(tree)
	if len(p.maps) != maxKept || len(p.lists) != maxKept {
		t.Fatalf("kept %d maps and %d lists, want %d of each", len(p.maps), len(p.lists), maxKept)
	}
	for _, m := range p.maps {
		if len(m) != 0 {
			t.Fatalf("kept a map that still holds %v", m)
		}
		if fmt.Sprintf("%p", m) == fmt.Sprintf("%p", big) {
			t.Fatal("kept a map of more than maxMap entries")
		}
	}
	for _, s := range p.lists {
		if cap(s) > maxList {
			t.Fatalf("kept a list of capacity %d", cap(s))
		}
	}
}

// TestPoolHandsOutEmpty: a map or list handed back holds nothing of what
// it held, not even in a list's spare capacity (which would keep its old
// elements from the collector).
func TestPoolHandsOutEmpty(t *testing.T) {
	var p Pool
	inner := map[string]any{"k": "v"}
	p.Release(map[string]any{"a": []any{inner, "x"}})
	m, s := p.Map(0), p.List()
	if len(m) != 0 || len(s) != 0 {
		t.Fatalf("handed out %v and %v", m, s)
	}
	for i, e := range s[:cap(s)] {
		if e != nil {
			t.Fatalf("a list handed out still holds %v at %d", e, i)
		}
	}
	if len(inner) != 0 {
		t.Fatal("Release left a map of the tree as it was")
	}
}

// TestNilPool: code that takes a *Pool works without one.
func TestNilPool(t *testing.T) {
	var p *Pool
	m, s := p.Map(0), p.List()
	m["k"], s = "v", append(s, 1)
	p.PutMap(m)
	p.Release(map[string]any{"m": m, "s": s})
	if m["k"] != "v" || s[0] != 1 {
		t.Fatal("a nil Pool emptied what it was handed")
	}
}
