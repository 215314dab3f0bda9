package bundle

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sync/singleflight"
	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// Result is what a consumer has after Get.
type Result struct {
	State State
	// Bundle, Location and SHA256 are the bundle to enforce: the one asked
	// for when State is StateFresh, the last good one when StateStale;
	// empty when StateMissing.
	Bundle   ruleset.Bundle
	Location string
	SHA256   string
}

// blob is a verified bundle held in memory, shared by its consumers.
type blob struct {
	bundle ruleset.Bundle
	refs   int
}

// Fetcher fetches bundles from S3-compatible storage and keeps each
// consumer's last good bundle. It is safe for concurrent use.
type Fetcher struct {
	opts  Options
	store *store
	// group joins the fetches of one location and sha256; downloads joins
	// the downloads of one location, whatever sha256 they were for.
	group, downloads singleflight.Group
	clock            clock.PassiveClock

	cmu       sync.Mutex
	client    *s3.Client
	transport *http.Transport
	version   uint64

	mu    sync.Mutex
	keys  map[string]record
	blobs map[string]*blob
	// persisted is the blob each consumer's record on disk names (the
	// records of earlier runs included), so that Retain and Forget find
	// every record without reading the directory again.
	persisted map[string]string
	// refused remembers content refusals until they expire, at most
	// maxRefused of them.
	refused map[string]refusal
	// seen is the object last downloaded from each location, at most
	// maxRefused of them (see unchangedUnless).
	seen map[string]seenObject
}

// NewFetcher returns a fetcher for opts.
func NewFetcher(opts Options) (*Fetcher, error) {
	opts = opts.withDefaults()
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bundle storage URL %q: use http(s)://host[:port]", opts.URL)
	}
	f := &Fetcher{opts: opts, clock: clock.RealClock{}, keys: map[string]record{}, blobs: map[string]*blob{}, refused: map[string]refusal{},
		persisted: map[string]string{}, seen: map[string]seenObject{}}
	if opts.Dir != "" {
		if f.store, err = openStore(opts.Dir, opts.CacheMaxBytes, opts.Metrics); err != nil {
			return nil, err
		}
		for _, r := range f.store.records() {
			f.persisted[r.Key] = r.SHA256
		}
	}
	return f, nil
}

// Get returns the bundle at location whose sha256 is sha for consumer key
// (for instance a WAFGatewayBindingPolicy's namespace/name), and makes it the
// consumer's last good bundle. When it cannot be had, the error says why
// (Reason maps it to a condition reason) and the Result holds the
// consumer's last good bundle (StateStale) or nothing (StateMissing).
// A bundle already verified, in memory or on disk, is not fetched again.
func (f *Fetcher) Get(ctx context.Context, key, location, sha string) (Result, error) {
	res, err := f.get(ctx, key, location, sha)
	if err != nil {
		return f.Deny(key, err)
	}
	f.opts.Metrics.Gets.WithLabelValues(stateLabel(res.State)).Inc()
	return res, nil
}

// Deny answers a request of key with err, as a Get that failed: the
// Result holds key's last good bundle (StateStale) or nothing. A consumer
// refused before anything is fetched (a location its namespace may not
// read, see Access) gets it, so it keeps its last good bundle as after any
// other failure.
func (f *Fetcher) Deny(key string, err error) (Result, error) {
	f.opts.Metrics.Errors.WithLabelValues(Reason(err)).Inc()
	res := f.lastGood(key)
	f.opts.Metrics.Gets.WithLabelValues(stateLabel(res.State)).Inc()
	return res, err
}

func (f *Fetcher) get(ctx context.Context, key, location, sha string) (Result, error) {
	loc, err := ParseLocation(location)
	if err != nil {
		return Result{}, &InvalidError{Err: err}
	}
	if !ValidSHA256(sha) {
		return Result{}, &InvalidError{Err: fmt.Errorf("bundle %s: sha256 %q is not 64 lowercase hex digits", location, sha)}
	}
	if b, ok := f.known(sha); ok {
		f.adopt(key, loc.String(), sha, b)
		return Result{State: StateFresh, Bundle: b, Location: loc.String(), SHA256: sha}, nil
	}
	id := sha + " " + loc.String()
	if err := f.refusedBefore(id); err != nil {
		return Result{}, err
	}
	v, err, _ := f.group.Do(id, func() (any, error) {
		return f.fetch(ctx, loc, sha)
	})
	if err != nil {
		f.refuse(id, err)
		return Result{}, err
	}
	b := v.(ruleset.Bundle)
	f.adopt(key, loc.String(), sha, b)
	return Result{State: StateFresh, Bundle: b, Location: loc.String(), SHA256: sha}, nil
}

// known returns the bundle of sha when it was verified before: in memory,
// or persisted (checked again as it is read).
func (f *Fetcher) known(sha string) (ruleset.Bundle, bool) {
	f.mu.Lock()
	bl := f.blobs[sha]
	f.mu.Unlock()
	if bl != nil {
		return bl.bundle, true
	}
	if f.store == nil {
		return ruleset.Bundle{}, false
	}
	data, ok := f.store.loadBlob(sha, f.opts.MaxBytes)
	if !ok {
		return ruleset.Bundle{}, false
	}
	b, err := f.decode(data)
	if err != nil {
		f.store.removeBlob(sha)
		return ruleset.Bundle{}, false
	}
	return b, true
}

// adopt makes b the last good bundle of key, in memory and on disk.
func (f *Fetcher) adopt(key, location, sha string, b ruleset.Bundle) {
	f.mu.Lock()
	old, had := f.keys[key]
	if had && old.SHA256 == sha && old.Location == location {
		f.mu.Unlock()
		return
	}
	bl := f.blobs[sha]
	if bl == nil {
		bl = &blob{bundle: b}
		f.blobs[sha] = bl
	}
	bl.refs++
	f.keys[key] = record{Key: key, Location: location, SHA256: sha}
	if had {
		f.release(old.SHA256)
	}
	prev, hadRecord := f.persisted[key]
	if f.store != nil {
		f.persisted[key] = sha
	}
	f.mu.Unlock()
	if f.store == nil {
		return
	}
	if err := f.store.saveRecord(record{Key: key, Location: location, SHA256: sha}); err != nil {
		f.opts.Metrics.StoreErrors.Inc()
		f.opts.Logger.Warn("last good bundle not persisted: it is enforced but would not survive a restart",
			"key", key, "location", location, "sha256", sha, "error", err)
	}
	// The bundle this consumer had before is deleted once no consumer
	// names it.
	if hadRecord && prev != sha {
		f.removeUnused(prev)
	}
}

// removeUnused removes the persisted blob of sha when no consumer, in
// memory or on disk, names it any more.
func (f *Fetcher) removeUnused(sha string) {
	if f.store == nil {
		return
	}
	f.mu.Lock()
	used := f.blobs[sha] != nil
	for _, s := range f.persisted {
		used = used || s == sha
	}
	f.mu.Unlock()
	if !used {
		f.store.removeBlob(sha)
	}
}

// release drops one reference to sha, and the blob from memory when
// nothing holds it any more; the caller holds mu.
func (f *Fetcher) release(sha string) {
	if bl := f.blobs[sha]; bl != nil {
		if bl.refs--; bl.refs <= 0 {
			delete(f.blobs, sha)
		}
	}
}

// lastGood returns key's last good bundle: in memory, else persisted by an
// earlier run.
func (f *Fetcher) lastGood(key string) Result {
	f.mu.Lock()
	r, ok := f.keys[key]
	var bl *blob
	if ok {
		bl = f.blobs[r.SHA256]
	}
	f.mu.Unlock()
	if bl != nil {
		return Result{State: StateStale, Bundle: bl.bundle, Location: r.Location, SHA256: r.SHA256}
	}
	if f.store == nil {
		return Result{State: StateMissing}
	}
	r, ok = f.store.loadRecord(key)
	if !ok {
		return Result{State: StateMissing}
	}
	b, ok := f.known(r.SHA256)
	if !ok {
		return Result{State: StateMissing}
	}
	f.mu.Lock()
	if _, raced := f.keys[key]; !raced {
		bl := f.blobs[r.SHA256]
		if bl == nil {
			bl = &blob{bundle: b}
			f.blobs[r.SHA256] = bl
		}
		bl.refs++
		f.keys[key] = r
	}
	f.mu.Unlock()
	return Result{State: StateStale, Bundle: b, Location: r.Location, SHA256: r.SHA256}
}

// Forget drops key's last good bundle (its consumer is gone): from memory
// and from disk, and the bundle itself once no other consumer has it, so a
// restart does not bring it back.
func (f *Fetcher) Forget(key string) {
	f.mu.Lock()
	r, ok := f.keys[key]
	delete(f.keys, key)
	if ok {
		f.release(r.SHA256)
	}
	sha := f.persisted[key]
	delete(f.persisted, key)
	f.mu.Unlock()
	if f.store == nil {
		return
	}
	f.store.deleteRecord(key)
	for _, s := range []string{r.SHA256, sha} {
		if s != "" {
			f.removeUnused(s)
		}
	}
}

// Retain forgets every consumer keep does not want: the ones known in
// memory and those persisted by earlier runs (their consumers may have
// gone while Portal was down).
func (f *Fetcher) Retain(keep func(key string) bool) {
	f.mu.Lock()
	var gone []string
	for k := range f.keys {
		if !keep(k) {
			gone = append(gone, k)
		}
	}
	for k := range f.persisted {
		if _, inMemory := f.keys[k]; !inMemory && !keep(k) {
			gone = append(gone, k)
		}
	}
	f.mu.Unlock()
	for _, k := range gone {
		f.Forget(k)
	}
}

// decode parses a verified document and checks its rules against the rule
// sandbox, as a RuleSet's are before they are compiled.
func (f *Fetcher) decode(data []byte) (ruleset.Bundle, error) {
	b, err := Decode(data)
	if err != nil {
		return ruleset.Bundle{}, err
	}
	if problems := ruleset.CheckWith(b, ruleset.Options{MaxDataFileBytes: f.opts.MaxDataFileBytes}); len(problems) > 0 {
		return ruleset.Bundle{}, fmt.Errorf("the rules fail the rule sandbox check: %s", problems[0])
	}
	return b, nil
}

// Install puts b into the rule set cache under key, as the RuleSet compiler
// puts a compiled revision, and returns the cache entry: the data planes
// poll it like any rule set. The revision id derives from the bundle's
// content, so every replica serves it under the same id.
func Install(c *cache.Cache, key string, b ruleset.Bundle) cache.Entry {
	e, _ := c.Put(key, ruleset.RevisionUUID(b.SHA256()), b.Rules, b.DataFiles)
	return e
}
