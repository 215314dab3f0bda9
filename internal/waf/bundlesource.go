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
// RuleSet of that namespace.
type bundleAdapter struct {
	fetcher *bundle.Fetcher
	cache   *cache.Cache
	log     *slog.Logger
	// trigger recomputes the tables; set once the controller exists.
	trigger func()

	mu       sync.Mutex
	results  map[string]bundleOutcome
	inflight map[string]bool
}

type bundleOutcome struct {
	rs             cache.TableRuleSet
	ok             bool
	reason, detail string
	at             time.Time
}

// bundleSource returns the adapter of f, or nil without bundle storage.
func bundleSource(f *bundle.Fetcher, c *cache.Cache, log *slog.Logger) *bundleAdapter {
	if f == nil {
		return nil
	}
	return &bundleAdapter{fetcher: f, cache: c, log: log, results: map[string]bundleOutcome{}, inflight: map[string]bool{}}
}

// Bundle implements binding.BundleFetcher.
func (a *bundleAdapter) Bundle(policy types.NamespacedName, location, sha string) (cache.TableRuleSet, bool, string, string) {
	key := policy.String() + "|" + location + "|" + sha
	a.mu.Lock()
	defer a.mu.Unlock()
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

func (a *bundleAdapter) fetch(key string, policy types.NamespacedName, location, sha string) {
	ctx, cancel := context.WithTimeout(context.Background(), bundleFetchTimeout)
	defer cancel()
	res, err := a.fetcher.Get(ctx, policy.String(), location, sha)
	o := bundleOutcome{at: time.Now()}
	if res.State != bundle.StateMissing && len(res.SHA256) >= 20 {
		name := "bundle-" + res.SHA256[:20]
		e := bundle.Install(a.cache, cache.Key(policy.Namespace, name), res.Bundle)
		o.rs, o.ok = cache.TableRuleSet{Namespace: policy.Namespace, Name: name, UUID: e.UUID}, true
	}
	if err != nil {
		_, o.reason, o.detail = bundle.Programmed(res, err)
		a.log.Warn("WAF bundle not fetched", "policy", policy.String(), "location", location, "reason", o.reason, "error", err)
	}
	a.mu.Lock()
	a.results[key] = o
	delete(a.inflight, key)
	trigger := a.trigger
	a.mu.Unlock()
	if trigger != nil {
		trigger()
	}
}
