package waf

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
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
// queues a fetch and answers "not yet" (the routes fail closed, a cold
// miss); fetches run in the background within the fetchQueue's slots; when
// one ends the verified bundle is put in the rule set cache under the
// policy's namespace, as cache.BundleName (bundle:<sha256 prefix>, a name
// no RuleSet can have), and the tables are recomputed. Data planes then read it like a RuleSet of that namespace.
// A location the policy's namespace may not read (bundle.Access) is refused
// before storage is asked.
type bundleAdapter struct {
	fetcher *bundle.Fetcher
	access  *bundle.Access
	metrics *bundle.Metrics
	cache   *cache.Cache
	log     *slog.Logger
	clock   clock.PassiveClock
	// trigger recomputes the tables; set once the controller exists.
	trigger func()

	mu      sync.Mutex
	results map[string]bundleOutcome
	// inflight are the keys whose fetch waits in queue or runs.
	inflight map[string]bool
	queue    *fetchQueue
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
func bundleSource(b *bundle.Bundles, c *cache.Cache, clk clock.PassiveClock, log *slog.Logger) *bundleAdapter {
	if b == nil {
		return nil
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &bundleAdapter{fetcher: b.Fetcher, access: b.Access, metrics: b.Metrics, cache: c, log: log, clock: clk,
		results: map[string]bundleOutcome{}, inflight: map[string]bool{}, queue: newFetchQueue(b.FetchConcurrency),
		installed: map[string]bool{}}
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
	if (!have || ((!o.ok || o.reason != "") && a.clock.Since(o.at) > bundleRetry)) && !a.inflight[key] {
		a.inflight[key] = true
		a.queue.push(fetchJob{key: key, policy: policy, location: location, sha: sha})
		a.dispatch()
	}
	if have {
		return o.rs, o.ok, o.reason, o.detail
	}
	if n, waiting := a.queue.ahead(policy.Namespace, key); waiting {
		return cache.TableRuleSet{}, false, wafv1alpha1.ReasonPending, fmt.Sprintf(
			"waiting to fetch bundle %s: %d fetches of namespace %s run or wait before it (at most %d of one namespace run at once)",
			location, n, policy.Namespace, a.queue.perNamespace)
	}
	return cache.TableRuleSet{}, false, wafv1alpha1.ReasonPending, "fetching bundle " + location + " from storage"
}

func bundleKey(policy types.NamespacedName, location, sha string) string {
	return policy.String() + "|" + location + "|" + sha
}

// dispatch starts the fetches the queue has slots for; the caller holds mu.
func (a *bundleAdapter) dispatch() {
	for {
		j, ok := a.queue.pop()
		if !ok {
			break
		}
		go a.fetch(j)
	}
	a.gauge()
}

// gauge publishes the queue's size; the caller holds mu.
func (a *bundleAdapter) gauge() {
	if a.metrics == nil {
		return
	}
	running, waiting := a.queue.size()
	a.metrics.Fetches.WithLabelValues(bundle.FetchRunning).Set(float64(running))
	a.metrics.Fetches.WithLabelValues(bundle.FetchWaiting).Set(float64(waiting))
}

// get fetches j's bundle, unless its namespace may not read the location:
// then storage is not asked, and the answer is the same whether the object
// exists or not.
func (a *bundleAdapter) get(j fetchJob) (bundle.Result, error) {
	if loc, err := bundle.ParseLocation(j.location); err == nil {
		if err := a.access.Check(j.policy.Namespace, loc); err != nil {
			return a.fetcher.Deny(j.policy.String(), err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bundleFetchTimeout)
	defer cancel()
	return a.fetcher.Get(ctx, j.policy.String(), j.location, j.sha)
}

func (a *bundleAdapter) fetch(j fetchJob) {
	res, err := a.get(j)
	o := bundleOutcome{at: a.clock.Now()}
	if err != nil {
		_, o.reason, o.detail = bundle.Programmed(res, err)
		a.log.Warn("WAF bundle not fetched", "policy", j.policy.String(), "location", j.location, "reason", o.reason, "error", err)
	}
	a.mu.Lock()
	delete(a.inflight, j.key)
	a.queue.done(j.policy.Namespace)
	a.dispatch()
	if a.wanted != nil && !a.wanted[j.key] {
		// The policy dropped this bundle while it was being fetched: do
		// not install it, and let the fetcher forget it again.
		keep := a.policies
		a.mu.Unlock()
		a.fetcher.Retain(func(k string) bool { return keep[k] })
		return
	}
	if res.State != bundle.StateMissing && len(res.SHA256) >= 20 {
		o.rs, o.ok = installBundle(a.cache, j.policy.Namespace, res.SHA256, res.Bundle), true
		a.installed[cache.Key(o.rs.Namespace, o.rs.Name)] = true
	}
	a.results[j.key] = o
	trigger := a.trigger
	a.mu.Unlock()
	if trigger != nil {
		trigger()
	}
}

// installBundle puts a verified bundle (sha256Hex of at least 20 digits) in
// the rule set cache for the policies of namespace, under
// cache.BundleName, and returns the rule set their routes' table rows name.
func installBundle(c *cache.Cache, namespace, sha256Hex string, b ruleset.Bundle) cache.TableRuleSet {
	name := cache.BundleName(sha256Hex)
	e := bundle.Install(c, cache.Key(namespace, name), b)
	return cache.TableRuleSet{Namespace: namespace, Name: name, UUID: e.UUID}
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
	for _, k := range a.queue.drop(func(k string) bool { return wanted[k] }) {
		delete(a.inflight, k)
	}
	a.gauge()
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
