// Package reuse keeps the maps and lists a goroutine has finished with, for
// the next object it decodes or builds a rule environment for.
//
// `portal eval` decodes every object into maps and builds a rule
// environment of maps around it, then drops both: about 14 KB a pod, most
// of it maps, which every job's collector then had to find and sweep. A
// worker that hands them back to a Pool fills the same memory for the next
// object while it is still in the core's cache, and the collector runs
// less often for all the jobs it shares.
package reuse

// Pool is a free list of maps and lists. It is not safe for concurrent use:
// each goroutine keeps its own. The zero value is ready; a nil *Pool
// allocates anew and keeps nothing, so code that takes one works without.
//
// What a Pool keeps is bounded whatever it is handed: at most maxKept maps
// and maxKept lists, none of them larger than Go makes a map of maxMap
// entries or a list of maxList.
type Pool struct {
	maps  []map[string]any
	lists [][]any
}

const (
	// maxKept bounds each free list: a few objects' worth.
	maxKept = 256
	// maxMap is the most entries a kept map may have held. Up to eight, a
	// Go map is a single group; the rule environment has a nine-entry one.
	maxMap = 16
	// maxList is the largest capacity a kept list may have.
	maxList = 16
)

// Map returns an empty map; a new one is made for size entries.
func (p *Pool) Map(size int) map[string]any {
	if p == nil || len(p.maps) == 0 {
		return make(map[string]any, size)
	}
	m := p.maps[len(p.maps)-1]
	p.maps = p.maps[:len(p.maps)-1]
	return m
}

// List returns an empty list.
func (p *Pool) List() []any {
	if p == nil || len(p.lists) == 0 {
		return []any{}
	}
	s := p.lists[len(p.lists)-1]
	p.lists = p.lists[:len(p.lists)-1]
	return s
}

// PutMap empties m and keeps it, if there is room. m's values are not
// handed back: they may belong to someone else.
func (p *Pool) PutMap(m map[string]any) {
	if p == nil || m == nil || len(m) > maxMap || len(p.maps) == maxKept {
		return
	}
	clear(m)
	p.maps = append(p.maps, m)
}

func (p *Pool) putList(s []any) {
	if cap(s) > maxList || len(p.lists) == maxKept {
		return
	}
	clear(s)
	p.lists = append(p.lists, s[:0])
}

// Release hands back every map and list of v, a tree a decoder built (no map
// or list in it twice). Nothing may refer to any of them afterwards.
func (p *Pool) Release(v any) {
	if p == nil {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			p.Release(e)
		}
		p.PutMap(x)
	case []any:
		for _, e := range x {
			p.Release(e)
		}
		p.putList(x)
	}
}
