package waf

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// bundleFixture is a bundle stored in the test storage.
type bundleFixture struct {
	loc, sha string
}

func (b bundleFixture) ref() wafv1alpha1.BundleReference {
	return wafv1alpha1.BundleReference{Location: b.loc, SHA256: b.sha}
}

// cacheKey is the rule set cache key the adapter installs b under for a
// policy of ns.
func (b bundleFixture) cacheKey(ns string) string { return cache.Key(ns, cache.BundleName(b.sha)) }

func storeBundle(t *testing.T, s *s3test.Storage, key string, id int) bundleFixture {
	t.Helper()
	data, err := bundle.Encode(ruleset.Bundle{Rules: "SecRuleEngine On\nSecRule ARGS \"@contains attack\" \"id:" + strconv.Itoa(id) + ",phase:1,deny,status:403\"\n"})
	if err != nil {
		t.Fatal(err)
	}
	s.Put(t, "bundles", key, data)
	sum := sha256.Sum256(data)
	return bundleFixture{loc: "s3://bundles/" + key, sha: hex.EncodeToString(sum[:])}
}

// newBundleAdapter returns an adapter reading url, where each namespace
// may read s3://bundles/<namespace>/..., fetching as many bundles at once
// as Portal does by default.
func newBundleAdapter(t *testing.T, url, dir string) (*bundleAdapter, *cache.Cache) {
	t.Helper()
	access, err := bundle.NewAccess([]string{"s3://bundles/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return newBundleAdapterWith(t, url, dir, access, bundle.DefaultFetchConcurrency)
}

func newBundleAdapterWith(t *testing.T, url, dir string, access *bundle.Access, concurrency int) (*bundleAdapter, *cache.Cache) {
	t.Helper()
	return newBundleAdapterOn(t, url, dir, access, concurrency, nil)
}

func newBundleAdapterOn(t *testing.T, url, dir string, access *bundle.Access, concurrency int, clk clock.PassiveClock) (*bundleAdapter, *cache.Cache) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := bundle.NewMetrics(prometheus.NewRegistry())
	f, err := bundle.NewFetcher(bundle.Options{URL: url, Dir: dir, Attempts: 1, Logger: log, Metrics: m,
		Source: bundle.StaticConfig{AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	c := cache.New(nil, nil)
	return bundleSource(&bundle.Bundles{Fetcher: f, Access: access, FetchConcurrency: concurrency, Metrics: m}, c, clk, log), c
}

// enforce asks for policy's bundle until the adapter has it in the cache.
func enforce(t *testing.T, a *bundleAdapter, policy types.NamespacedName, b bundleFixture) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, ok, _, _ := a.Bundle(policy, b.loc, b.sha)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: bundle %s never enforced: %v", policy, b.loc, err)
	}
}

func blobExists(dir, sha string) bool {
	_, err := os.Stat(filepath.Join(dir, "blobs", sha))
	return err == nil
}

// A bundle stays in the rule set cache and the persisted last good store
// while any policy references it, and is deleted from both when the last
// one goes or moves to another bundle; a restart does not bring back a
// deleted one, and a policy deleted while Portal was down loses its
// persisted bundle at the first table computation.
func TestBundlesDeletedWhenUnused(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, "bundles")
	a, b := storeBundle(t, s, "shop/a.json", 7001), storeBundle(t, s, "shop/b.json", 7002)
	dir := t.TempDir()
	ad, c := newBundleAdapter(t, s.URL(), dir)
	p1, p2, p3 := types.NamespacedName{Namespace: "shop", Name: "p1"}, types.NamespacedName{Namespace: "shop", Name: "p2"}, types.NamespacedName{Namespace: "shop", Name: "p3"}
	enforce(t, ad, p1, a)
	enforce(t, ad, p2, a)
	enforce(t, ad, p3, b)
	check := func(step string, inCache, onDisk map[bundleFixture]bool) {
		t.Helper()
		for bf, want := range inCache {
			if _, got := c.Get(bf.cacheKey("shop")); got != want {
				t.Errorf("%s: bundle %s in the rule set cache %v, want %v", step, bf.loc, got, want)
			}
		}
		for bf, want := range onDisk {
			if got := blobExists(dir, bf.sha); got != want {
				t.Errorf("%s: bundle %s persisted %v, want %v", step, bf.loc, got, want)
			}
		}
	}
	ad.Retain(map[types.NamespacedName]wafv1alpha1.BundleReference{p1: a.ref(), p2: a.ref(), p3: b.ref()})
	check("all in use", map[bundleFixture]bool{a: true, b: true}, map[bundleFixture]bool{a: true, b: true})

	ad.Retain(map[types.NamespacedName]wafv1alpha1.BundleReference{p2: a.ref(), p3: b.ref()})
	check("p1 deleted, p2 still uses a", map[bundleFixture]bool{a: true, b: true}, map[bundleFixture]bool{a: true, b: true})

	ad.Retain(map[types.NamespacedName]wafv1alpha1.BundleReference{p3: b.ref()})
	check("p2 deleted", map[bundleFixture]bool{a: false, b: true}, map[bundleFixture]bool{a: false, b: true})

	// p3 moves to a: b is unused once a is enforced.
	enforce(t, ad, p3, a)
	ad.Retain(map[types.NamespacedName]wafv1alpha1.BundleReference{p3: a.ref()})
	check("p3 moved to a", map[bundleFixture]bool{a: true, b: false}, map[bundleFixture]bool{a: true, b: false})

	// A restart with storage down: p2's bundle, deleted, is not a last
	// good bundle any more; p3's is.
	s.Stop()
	f2, _ := newBundleAdapter(t, s.URL(), dir)
	if res, _ := f2.fetcher.Get(t.Context(), p2.String(), b.loc, b.sha); res.State != bundle.StateMissing {
		t.Errorf("after a restart the deleted policy p2 has a bundle again: %s %s", res.State, res.SHA256)
	}
	if res, _ := f2.fetcher.Get(t.Context(), p3.String(), b.loc, b.sha); res.State != bundle.StateStale || res.SHA256 != a.sha {
		t.Errorf("after a restart p3's last good bundle is %s %s, want a", res.State, res.SHA256)
	}

	// p3 is deleted while Portal is down: the next start deletes its
	// persisted bundle at the first table computation.
	f3, _ := newBundleAdapter(t, s.URL(), dir)
	f3.Retain(map[types.NamespacedName]wafv1alpha1.BundleReference{})
	if blobExists(dir, a.sha) {
		t.Errorf("the bundle of a policy deleted while Portal was down is still persisted")
	}
	if res, _ := f3.fetcher.Get(t.Context(), p3.String(), a.loc, a.sha); res.State != bundle.StateMissing {
		t.Errorf("the deleted policy p3 still has a last good bundle: %s", res.State)
	}
}

// A bundle that could not be had is fetched again once bundleRetry has
// passed on the adapter's clock: an object uploaded after the policy that
// pins it is enforced without a restart, and one that stays missing is not
// asked for on every reconcile.
func TestFailedBundleIsRetriedOnTheClock(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, "bundles")
	good := storeBundle(t, s, "shop/rules.json", 7103)
	access, err := bundle.NewAccess([]string{"s3://bundles/"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	a, _ := newBundleAdapterOn(t, s.URL(), "", access, bundle.DefaultFetchConcurrency, clk)
	policy := types.NamespacedName{Namespace: "shop", Name: "p"}
	missing := strings.Replace(good.loc, "rules.json", "later.json", 1)
	poll(t, "the missing bundle reported", func() bool {
		_, reason, _ := reasonOf(a, policy, missing, good.sha)
		return reason == bundle.ReasonFetchError
	})
	storeBundle(t, s, "shop/later.json", 7103)
	if ok, reason, _ := reasonOf(a, policy, missing, good.sha); ok || reason != bundle.ReasonFetchError {
		t.Fatalf("within the retry interval the adapter reports %v %s, want the failure it holds", ok, reason)
	}
	clk.SetTime(clk.Now().Add(bundleRetry + time.Second))
	// Well within bundleRetry of wall time: only the clock can have moved.
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, bundleRetry/3, true, func(context.Context) (bool, error) {
		ok, _, _ := reasonOf(a, policy, missing, good.sha)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("the uploaded bundle is not enforced after the retry interval passed on the clock: %v", err)
	}
}
