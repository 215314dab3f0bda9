package runtime

import (
	"sync"
	"time"

	"k8s.io/utils/lru"
)

// dedupKeys remembers when each rule, actor and target last raised a
// finding, at most max keys in all. Keys are kept per namespace of the
// target, and past the bound the least recently used key of the namespace
// holding the most gives way: a tenant flooding unique keys (a new actor or
// pod per request) evicts its own, never another namespace's, whose
// actions would then run again within their window.
type dedupKeys struct {
	max    int
	window time.Duration

	mu   sync.Mutex
	byNS map[string]*lru.Cache
	n    int
	// byCount holds the namespaces by how many keys they hold, and top is
	// the highest count held: the fullest namespace is found in O(1), as
	// counts move by one at a time.
	byCount map[int]map[string]struct{}
	top     int
}

func newDedupKeys(limit int, window time.Duration) *dedupKeys {
	return &dedupKeys{max: limit, window: window, byNS: map[string]*lru.Cache{}, byCount: map[int]map[string]struct{}{}}
}

// first reports whether key, of a target in namespace ns, raised no
// finding within the window before now, and records now for it.
func (d *dedupKeys) first(ns, key string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.byNS[ns]
	if c == nil {
		c = lru.New(0) // bounded here, across namespaces
		d.byNS[ns] = c
	}
	if v, ok := c.Get(key); ok && now.Sub(v.(time.Time)) < d.window {
		return false
	}
	held := c.Len()
	c.Add(key, now)
	if c.Len() > held {
		d.move(ns, held, held+1)
		d.n++
	}
	for d.n > d.max && d.top > 0 {
		d.evictFullest()
	}
	return true
}

// evictFullest drops the least recently used key of a namespace holding
// the most.
func (d *dedupKeys) evictFullest() {
	var ns string
	for ns = range d.byCount[d.top] {
		break
	}
	d.byNS[ns].RemoveOldest()
	d.n--
	d.move(ns, d.top, d.top-1)
}

// move records that ns went from holding from keys to holding to.
func (d *dedupKeys) move(ns string, from, to int) {
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
