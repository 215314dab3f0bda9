package runtime

import (
	"sync"

	"k8s.io/utils/lru"
)

// nsLRU is a least-recently-used map of at most max keys, kept per
// namespace (of the event's object): past the bound, the least recently
// used key of the namespace holding the most gives way. A tenant flooding
// unique keys (a new actor, pod or request per event) evicts its own, never
// another namespace's: their deduplication keys (whose actions would run
// again within their window) and the audit IDs of their long-running
// requests (which would be evaluated again when they end).
type nsLRU struct {
	max int

	mu   sync.Mutex
	byNS map[string]*lru.Cache
	n    int
	// byCount holds the namespaces by how many keys they hold, and top is
	// the highest count held: the fullest namespace is found in O(1), as
	// counts move by one at a time.
	byCount map[int]map[string]struct{}
	top     int
}

func newNSLRU(limit int) *nsLRU {
	return &nsLRU{max: limit, byNS: map[string]*lru.Cache{}, byCount: map[int]map[string]struct{}{}}
}

// update calls f with the value key holds in namespace ns (ok false when
// none) and stores what f returns when it says so, in one step: two
// workers never both see a key missing.
func (d *nsLRU) update(ns, key string, f func(old any, ok bool) (any, bool)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.byNS[ns]
	var (
		old any
		ok  bool
	)
	if c != nil {
		old, ok = c.Get(key)
	}
	v, store := f(old, ok)
	if !store {
		return
	}
	if c == nil {
		c = lru.New(0) // bounded here, across namespaces
		d.byNS[ns] = c
	}
	held := c.Len()
	c.Add(key, v)
	if c.Len() > held {
		d.n++
		d.move(ns, held, held+1)
	}
	for d.n > d.max && d.top > 0 {
		d.evictFullest()
	}
}

// remove forgets key in ns, reporting whether it was there.
func (d *nsLRU) remove(ns, key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.byNS[ns]
	if c == nil {
		return false
	}
	if _, ok := c.Get(key); !ok {
		return false
	}
	held := c.Len()
	c.Remove(key)
	d.n--
	d.move(ns, held, held-1)
	return true
}

// evictFullest drops the least recently used key of a namespace holding
// the most.
func (d *nsLRU) evictFullest() {
	var ns string
	for ns = range d.byCount[d.top] {
		break
	}
	d.byNS[ns].RemoveOldest()
	d.n--
	d.move(ns, d.top, d.top-1)
}

// move records that ns went from holding from keys to holding to.
func (d *nsLRU) move(ns string, from, to int) {
	if set := d.byCount[from]; set != nil {
		delete(set, ns)
		if len(set) == 0 {
			delete(d.byCount, from)
		}
	}
	if to == 0 {
		delete(d.byNS, ns)
	} else {
		if d.byCount[to] == nil {
			d.byCount[to] = map[string]struct{}{}
		}
		d.byCount[to][ns] = struct{}{}
	}
	if to > d.top {
		d.top = to
	}
	for d.top > 0 && len(d.byCount[d.top]) == 0 {
		d.top--
	}
}
