package waf

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/cache"
)

// Bounds of the bundle adapter.
const (
	// bundleRetry is how soon a bundle that could not be had (or is
	// stale) is asked for again.
	bundleRetry = 30 * time.Second
	// bundleFetchTimeout bounds one Get, retries included.
	bundleFetchTimeout = 5 * time.Minute
)

// bundleAdapter resolves WAFGatewayBindingPolicy spec.bundle through the
// S3 bundle Fetcher without blocking the table controller: the first ask
// starts a fetch in the background and answers "not yet" (the routes fail
// closed, a cold miss); when the fetch ends the verified bundle is put in
// the rule set cache under the policy's namespace, as bundle-<sha256
// prefix>, and the tables are recomputed. Data planes then read it like a
// RuleSet of that namespace. A location the policy's namespace may not read
// (bundle.Access) is refused before storage is asked.
type bundleAdapter struct {
	fetcher *bundle.Fetcher
	access  *bundle.Access
	cache   *cache.Cache
	log     *slog.Logger
	// trigger recomputes the tables; set once the controller exists.
	trigger func()

	mu       sync.Mutex
	results  map[string]bundleOutcome
	inflight map[string]bool
	// installed are the cache keys bundles were put under; wanted is the
	// set of policy|location|sha256 the last Retain kept (nil before the
	// first), policies its policies.
	installed map[string]bool
	wanted    map[string]bool
	policies  map[string]bool
}

type bundleOutcome struct {
	rs             cache.TableRuleSet
	ok             bool
	reason, detail string
	at             time.Time
}

// bundleSource returns the adapter of b, or nil without bundle storage.
func bundleSource(b *bundle.Bundles, c *cache.Cache, log *slog.Logger) *bundleAdapter {
	if b == nil {
		return nil
	}
	return &bundleAdapter{fetcher: b.Fetcher, access: b.Access, cache: c, log: log, results: map[string]bundleOutcome{},
		inflight: map[string]bool{}, installed: map[string]bool{}}
}

// Bundle implements binding.BundleFetcher.
func (a *bundleAdapter) Bundle(policy types.NamespacedName, location, sha string) (cache.TableRuleSet, bool, string, string) {
	key := bundleKey(policy, location, sha)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wanted != nil {
		// Asked for, so wanted until a Retain says otherwise.
		a.wanted[key], a.policies[policy.String()] = true, true
	}
	o, have := a.results[key]
	if (!have || ((!o.ok || o.reason != "") && time.Since(o.at) > bundleRetry)) && !a.inflight[key] {
		a.inflight[key] = true
		go a.fetch(key, policy, location, sha)
	}
	if !have {
		return cache.TableRuleSet{}, false, wafv1alpha1.ReasonPending, "fetching bundle " + location + " from storage"
	}
	return o.rs, o.ok, o.reason, o.detail
}

func bundleKey(policy types.NamespacedName, location, sha string) string {
	return policy.String() + "|" + location + "|" + sha
}

// get fetches policy's bundle, unless its namespace may not read the
// location: then storage is not asked, and the answer is the same whether
// the object exists or not.
func (a *bundleAdapter) get(policy types.NamespacedName, location, sha string) (bundle.Result, error) {
	if loc, err := bundle.ParseLocation(location); err == nil {
		if err := a.access.Check(policy.Namespace, loc); err != nil {
			return a.fetcher.Deny(policy.String(), err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bundleFetchTimeout)
	defer cancel()
	return a.fetcher.Get(ctx, policy.String(), location, sha)
}

func (a *bundleAdapter) fetch(key string, policy types.NamespacedName, location, sha string) {
	res, err := a.get(policy, location, sha)
	o := bundleOutcome{at: time.Now()}
	if err != nil {
		_, o.reason, o.detail = bundle.Programmed(res, err)
		a.log.Warn("WAF bundle not fetched", "policy", policy.String(), "location", location, "reason", o.reason, "error", err)
	}
	a.mu.Lock()
	delete(a.inflight, key)
	if a.wanted != nil && !a.wanted[key] {
		// The policy dropped this bundle while it was being fetched: do
		// not install it, and let the fetcher forget it again.
		keep := a.policies
		a.mu.Unlock()
		a.fetcher.Retain(func(k string) bool { return keep[k] })
		return
	}
	if res.State != bundle.StateMissing && len(res.SHA256) >= 20 {
		name := "bundle-" + res.SHA256[:20]
		ck := cache.Key(policy.Namespace, name)
		e := bundle.Install(a.cache, ck, res.Bundle)
		a.installed[ck] = true
		o.rs, o.ok = cache.TableRuleSet{Namespace: policy.Namespace, Name: name, UUID: e.UUID}, true
	}
	a.results[key] = o
	trigger := a.trigger
	a.mu.Unlock()
	if trigger != nil {
		trigger()
	}
}

// Retain implements binding.BundleFetcher: results of bundles no policy
// asks for any more are dropped, a bundle no remaining result enforces is
// deleted from the rule set cache (data planes can no longer fetch it),
// and the fetcher forgets the policies gone, in memory and on disk.
func (a *bundleAdapter) Retain(policies map[types.NamespacedName]wafv1alpha1.BundleReference) {
	wanted, keep := map[string]bool{}, map[string]bool{}
	for p, b := range policies {
		wanted[bundleKey(p, b.Location, b.SHA256)] = true
		keep[p.String()] = true
	}
	a.mu.Lock()
	a.wanted, a.policies = wanted, keep
	for k := range a.results {
		if !wanted[k] {
			delete(a.results, k)
		}
	}
	enforced := map[string]bool{}
	for _, o := range a.results {
		if o.ok {
			enforced[cache.Key(o.rs.Namespace, o.rs.Name)] = true
		}
	}
	var drop []string
	for k := range a.installed {
		if !enforced[k] {
			drop = append(drop, k)
			delete(a.installed, k)
		}
	}
	a.mu.Unlock()
	for _, k := range drop {
		a.cache.Delete(k)
	}
	a.fetcher.Retain(func(k string) bool { return keep[k] })
}
