// Package cache is the rule set cache: an in-memory, versioned store of
// compiled rule set bundles keyed by RuleSet namespace/name, the HTTP server
// the data planes poll it through, and a client for that server.
//
// Every replica of Portal compiles every RuleSet into its own cache, so the
// server does not need leader election. Revision ids derive from the bundle
// digest, so all replicas serve the same content under the same id.
package cache

import (
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Entry is one revision of a rule set, as `GET /rules/{namespace}/{name}`
// returns it. Entries are immutable once stored.
type Entry struct {
	UUID      string    `json:"uuid"`
	Timestamp time.Time `json:"timestamp"`
	Rules     string    `json:"rules"`
	// DataFiles maps a file name to its content; JSON encodes the content
	// in base64 and leaves the field out when there are no files.
	DataFiles map[string][]byte `json:"dataFiles,omitempty"`
}

// Latest is what `GET /rules/{namespace}/{name}/latest` returns.
type Latest struct {
	UUID      string    `json:"uuid"`
	Timestamp time.Time `json:"timestamp"`
}

// Size is the entry's weight in the cache: rules plus file names and
// contents, in bytes.
func (e *Entry) Size() int64 {
	n := int64(len(e.Rules))
	for name, c := range e.DataFiles {
		n += int64(len(name) + len(c))
	}
	return n
}

// Key is the cache key of a RuleSet.
func Key(namespace, name string) string { return namespace + "/" + name }

// Cache holds the revisions of every rule set, oldest first; the last
// revision of a key is its latest and is never evicted. It is safe for
// concurrent use.
type Cache struct {
	clock   clock.PassiveClock
	metrics *Metrics

	mu    sync.RWMutex
	keys  map[string][]*Entry
	total int64
	count int
}

// New returns an empty cache. clk stamps new entries and drives age-based
// eviction (nil: the real clock); m may be nil.
func New(clk clock.PassiveClock, m *Metrics) *Cache {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Cache{clock: clk, metrics: m, keys: map[string][]*Entry{}}
}

// Metrics returns the metrics the cache updates (nil when none).
func (c *Cache) Metrics() *Metrics { return c.metrics }

// Put makes a revision with this id, rules and data files the latest of key
// and returns it. When the latest revision already has this id, nothing
// changes and Put returns it with created false. An older revision with the
// same id (content reverted) is moved to the end with a new timestamp. Put
// copies files.
func (c *Cache) Put(key, id, rules string, files map[string][]byte) (e Entry, created bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	revs := c.keys[key]
	if n := len(revs); n > 0 && revs[n-1].UUID == id {
		return *revs[n-1], false
	}
	if i := slices.IndexFunc(revs, func(e *Entry) bool { return e.UUID == id }); i >= 0 {
		c.drop(revs[i])
		revs = slices.Delete(revs, i, i+1)
	}
	var copied map[string][]byte
	if len(files) > 0 {
		copied = make(map[string][]byte, len(files))
		for name, data := range files {
			copied[name] = slices.Clone(data)
		}
	}
	entry := &Entry{UUID: id, Timestamp: c.clock.Now().UTC(), Rules: rules, DataFiles: copied}
	c.keys[key] = append(revs, entry)
	c.total += entry.Size()
	c.count++
	c.observe()
	return *entry, true
}

// Get returns the latest revision of key.
func (c *Cache) Get(key string) (Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	revs := c.keys[key]
	if len(revs) == 0 {
		return Entry{}, false
	}
	return *revs[len(revs)-1], true
}

// Revisions returns how many revisions key holds.
func (c *Cache) Revisions(key string) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.keys[key])
}

// Delete removes every revision of key (its RuleSet is gone).
func (c *Cache) Delete(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.keys[key] {
		c.drop(e)
	}
	delete(c.keys, key)
	c.observe()
}

// Keys returns the keys in the cache, sorted.
func (c *Cache) Keys() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Sorted(maps.Keys(c.keys))
}

// Stats returns the number of revisions and their total size in bytes.
func (c *Cache) Stats() (entries int, bytes int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.count, c.total
}

// GC evicts revisions that are not the latest of their key: first those
// older than maxAge, then, while the cache is larger than maxSize bytes,
// the oldest of the rest. A zero limit is not applied. It returns the number
// evicted for each reason; the cache may stay above maxSize when the latest
// revisions alone exceed it.
func (c *Cache) GC(maxAge time.Duration, maxSize int64) (byAge, bySize int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	var old []*Entry
	for key, revs := range c.keys {
		kept := revs[:0]
		for i, e := range revs {
			switch {
			case i == len(revs)-1:
				kept = append(kept, e)
			case maxAge > 0 && now.Sub(e.Timestamp) > maxAge:
				c.drop(e)
				byAge++
			default:
				kept = append(kept, e)
				old = append(old, e)
			}
		}
		c.keys[key] = kept
	}
	if maxSize > 0 && c.total > maxSize {
		slices.SortFunc(old, func(a, b *Entry) int { return a.Timestamp.Compare(b.Timestamp) })
		evict := map[*Entry]bool{}
		for _, e := range old {
			if c.total <= maxSize {
				break
			}
			evict[e] = true
			c.drop(e)
			bySize++
		}
		for key, revs := range c.keys {
			c.keys[key] = slices.DeleteFunc(revs, func(e *Entry) bool { return evict[e] })
		}
	}
	if c.metrics != nil {
		c.metrics.Evictions.WithLabelValues("age").Add(float64(byAge))
		c.metrics.Evictions.WithLabelValues("size").Add(float64(bySize))
	}
	c.observe()
	return byAge, bySize
}

// drop accounts for a removed entry; the caller removes it from its key.
func (c *Cache) drop(e *Entry) {
	c.total -= e.Size()
	c.count--
}

// observe publishes the gauges; the caller holds mu.
func (c *Cache) observe() {
	if c.metrics == nil {
		return
	}
	c.metrics.Entries.Set(float64(c.count))
	c.metrics.Bytes.Set(float64(c.total))
}
