// Package cache is the rule set cache: an in-memory, versioned store of
// compiled rule set bundles keyed by RuleSet namespace/name, the HTTP server
// the data planes poll it through, and a client for that server.
//
// Every replica of Portal compiles every RuleSet into its own cache, so the
// server does not need leader election. Revision ids derive from the bundle
// digest, so all replicas serve the same content under the same id.
package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
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

// Latest is what `GET /rules/{namespace}/{name}/latest` returns. SHA256 is
// the hex sha256 of the exact body `GET /rules/{namespace}/{name}` answers
// for this revision: a data plane checks it before compiling what it got.
type Latest struct {
	UUID      string    `json:"uuid"`
	Timestamp time.Time `json:"timestamp"`
	SHA256    string    `json:"sha256"`
}

// revision is a stored Entry, encoded once when it is stored: the server
// answers every request with these bytes and never encodes per request.
type revision struct {
	uuid      string
	timestamp time.Time
	size      int64
	// body is the JSON of the Entry; latest the JSON of its Latest.
	body, latest []byte
}

// encode makes the stored form of e.
func encode(e *Entry) (*revision, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode rule set revision %s: %w", e.UUID, err)
	}
	sum := sha256.Sum256(body)
	latest, err := json.Marshal(Latest{UUID: e.UUID, Timestamp: e.Timestamp, SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		return nil, fmt.Errorf("encode rule set revision %s: %w", e.UUID, err)
	}
	return &revision{uuid: e.UUID, timestamp: e.Timestamp, size: e.Size(), body: body, latest: latest}, nil
}

func (r *revision) entry() Entry {
	var e Entry
	// The bytes were made by json.Marshal of an Entry in encode.
	_ = json.Unmarshal(r.body, &e)
	return e
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

// Key is the cache key of a RuleSet, or of a bundle named by BundleName.
func Key(namespace, name string) string { return namespace + "/" + name }

// bundlePrefix starts the names of S3 bundles. A Kubernetes object name
// cannot hold ':', so no RuleSet of the namespace can be named like a
// bundle: a RuleSet named "bundle-<digest>" neither replaces a bundle a
// policy enforces nor is deleted with it, as it was when bundles were
// named "bundle-<digest>" in the same key space.
const bundlePrefix = "bundle:"

// bundleDigits is how many hex digits of a bundle's sha256 its name keeps.
const bundleDigits = 20

// BundleName is the name a verified WAF bundle (WAFGatewayBindingPolicy
// spec.bundle) is cached and served under in its policy's namespace:
// "bundle:" and the first 20 hex digits of its sha256. It is served at
// /rules/{namespace}/bundle:{digits} like a RuleSet. sha256Hex must have
// at least 20 digits.
func BundleName(sha256Hex string) string {
	return bundlePrefix + strings.ToLower(sha256Hex[:bundleDigits])
}

// isBundleName reports whether name is one BundleName makes.
func isBundleName(name string) bool {
	digits, ok := strings.CutPrefix(name, bundlePrefix)
	if !ok || len(digits) != bundleDigits {
		return false
	}
	for _, c := range digits {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Cache holds the revisions of every rule set, oldest first; the last
// revision of a key is its latest and is never evicted. Revisions are held
// in their encoded (JSON) form only; the byte counts are of the content
// (Entry.Size), which the encoding makes up to a third larger (base64 data
// files). It is safe for concurrent use.
type Cache struct {
	clock   clock.PassiveClock
	metrics *Metrics

	mu    sync.RWMutex
	keys  map[string][]*revision
	total int64
	count int

	tables tables

	watchMu  sync.Mutex
	watchers []chan struct{}
}

// Watch returns a channel that receives a value after revisions are stored
// or deleted (coalesced: one value may stand for many changes), for
// consumers that derive state from the latest revisions.
func (c *Cache) Watch() <-chan struct{} {
	ch := make(chan struct{}, 1)
	c.watchMu.Lock()
	c.watchers = append(c.watchers, ch)
	c.watchMu.Unlock()
	return ch
}

func (c *Cache) notify() {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	for _, ch := range c.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// New returns an empty cache. clk stamps new entries and drives age-based
// eviction (nil: the real clock); m may be nil.
func New(clk clock.PassiveClock, m *Metrics) *Cache {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Cache{clock: clk, metrics: m, keys: map[string][]*revision{}}
}

// Metrics returns the metrics the cache updates (nil when none).
func (c *Cache) Metrics() *Metrics { return c.metrics }

// Put makes a revision with this id, rules and data files the latest of key
// and returns it. When the latest revision already has this id, nothing
// changes and Put returns it with created false. An older revision with the
// same id (content reverted) is moved to the end with a new timestamp. Put
// encodes the revision once, here; the returned Entry shares nothing with
// the cache.
func (c *Cache) Put(key, id, rules string, files map[string][]byte) (e Entry, created bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	revs := c.keys[key]
	if n := len(revs); n > 0 && revs[n-1].uuid == id {
		return revs[n-1].entry(), false
	}
	var copied map[string][]byte
	if len(files) > 0 {
		copied = make(map[string][]byte, len(files))
		for name, data := range files {
			copied[name] = slices.Clone(data)
		}
	}
	entry := Entry{UUID: id, Timestamp: c.clock.Now().UTC(), Rules: rules, DataFiles: copied}
	rev, err := encode(&entry)
	if err != nil {
		// An Entry holds strings, bytes and a time: JSON cannot fail on it.
		panic(err)
	}
	if i := slices.IndexFunc(revs, func(r *revision) bool { return r.uuid == id }); i >= 0 {
		c.drop(revs[i])
		revs = slices.Delete(revs, i, i+1)
	}
	c.keys[key] = append(revs, rev)
	c.total += rev.size
	c.count++
	c.observe()
	// Under c.mu, so watchers see changes in order; notify never blocks.
	c.notify()
	return entry, true
}

// Get returns the latest revision of key.
func (c *Cache) Get(key string) (Entry, bool) {
	r := c.latest(key)
	if r == nil {
		return Entry{}, false
	}
	return r.entry(), true
}

// latest returns the stored latest revision of key, or nil.
func (c *Cache) latest(key string) *revision {
	c.mu.RLock()
	defer c.mu.RUnlock()
	revs := c.keys[key]
	if len(revs) == 0 {
		return nil
	}
	return revs[len(revs)-1]
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
	c.notify()
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
	var old []*revision
	for key, revs := range c.keys {
		kept := revs[:0]
		for i, e := range revs {
			switch {
			case i == len(revs)-1:
				kept = append(kept, e)
			case maxAge > 0 && now.Sub(e.timestamp) > maxAge:
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
		slices.SortFunc(old, func(a, b *revision) int { return a.timestamp.Compare(b.timestamp) })
		evict := map[*revision]bool{}
		for _, e := range old {
			if c.total <= maxSize {
				break
			}
			evict[e] = true
			c.drop(e)
			bySize++
		}
		for key, revs := range c.keys {
			c.keys[key] = slices.DeleteFunc(revs, func(e *revision) bool { return evict[e] })
		}
	}
	if c.metrics != nil {
		c.metrics.Evictions.WithLabelValues("age").Add(float64(byAge))
		c.metrics.Evictions.WithLabelValues("size").Add(float64(bySize))
	}
	c.observe()
	return byAge, bySize
}

// drop accounts for a removed revision; the caller removes it from its key.
func (c *Cache) drop(e *revision) {
	c.total -= e.size
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
