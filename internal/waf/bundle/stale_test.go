package bundle_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
)

// An update that cannot be fetched keeps the last good bundle, through a
// storage outage and a controller restart (a new Fetcher on the same
// directory), until storage is back.
func TestStaleBundleThroughOutageAndRestart(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	a, b := doc(t, 3001), doc(t, 3002)
	s.Put(t, bucket, "v1.json", a)
	s.Put(t, bucket, "v2.json", b)
	locA, locB := "s3://"+bucket+"/v1.json", "s3://"+bucket+"/v2.json"
	dir := t.TempDir()
	opts := bundle.Options{URL: s.URL(), Source: rootCreds(), Attempts: 2, Dir: dir}

	f, _ := fetcher(t, opts)
	if res, err := f.Get(ctx(t), "ns/p", locA, sum(a)); err != nil || res.State != bundle.StateFresh {
		t.Fatalf("first fetch: %s %v", res.State, err)
	}
	s.Stop()
	res, err := f.Get(ctx(t), "ns/p", locB, sum(b))
	if res.State != bundle.StateStale || res.SHA256 != sum(a) || res.Location != locA || bundle.Reason(err) != bundle.ReasonFetchError {
		t.Fatalf("update during outage: state %s sha %s reason %s, want the last good bundle kept", res.State, res.SHA256, bundle.Reason(err))
	}

	// Restart: a new fetcher reads the persisted last good bundle.
	f2, m2 := fetcher(t, opts)
	res, err = f2.Get(ctx(t), "ns/p", locB, sum(b))
	if res.State != bundle.StateStale || res.SHA256 != sum(a) || res.Bundle.Rules == "" {
		t.Fatalf("after restart: state %s sha %s error %v, want the persisted last good bundle", res.State, res.SHA256, err)
	}
	// The bundle the consumer had is verified from disk without storage.
	if res, err := f2.Get(ctx(t), "ns/p", locA, sum(a)); err != nil || res.State != bundle.StateFresh {
		t.Fatalf("unchanged bundle after restart: %s %v", res.State, err)
	}
	// Another consumer never had one: a cold miss.
	if res, _ := f2.Get(ctx(t), "ns/other", locB, sum(b)); res.State != bundle.StateMissing {
		t.Fatalf("consumer without a last good bundle: %s, want Missing", res.State)
	}
	if got := testutil.ToFloat64(m2.Gets.WithLabelValues("stale")); got != 1 {
		t.Fatalf("stale gets %v, want 1", got)
	}

	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if res, err := f2.Get(ctx(t), "ns/p", locB, sum(b)); err != nil || res.State != bundle.StateFresh || res.SHA256 != sum(b) {
		t.Fatalf("storage back: %s %v", res.State, err)
	}
	// The new last good bundle is what a third start would find.
	s.Stop()
	f3, _ := fetcher(t, opts)
	if res, _ := f3.Get(ctx(t), "ns/p", locA, sum(a)); res.State != bundle.StateStale || res.SHA256 != sum(b) {
		t.Fatalf("third start: %s %s, want v2 as last good", res.State, res.SHA256)
	}
}

// A persisted bundle that no longer matches its digest (disk damage, a
// hand edit) is not used.
func TestDamagedPersistedBundleIsNotUsed(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	a := doc(t, 3003)
	s.Put(t, bucket, "v1.json", a)
	dir := t.TempDir()
	opts := bundle.Options{URL: s.URL(), Source: rootCreds(), Attempts: 1, Dir: dir}
	f, _ := fetcher(t, opts)
	if _, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v1.json", sum(a)); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	blob := filepath.Join(dir, "blobs", sum(a))
	// Another valid bundle document under a's name.
	if err := os.WriteFile(blob, doc(t, 3999), 0o600); err != nil {
		t.Fatal(err)
	}
	f2, _ := fetcher(t, opts)
	if res, _ := f2.Get(ctx(t), "ns/p", "s3://"+bucket+"/v1.json", sum(a)); res.State != bundle.StateMissing {
		t.Fatalf("damaged blob gave %s, want Missing", res.State)
	}
}

// The directory holds at most --bundle-cache-max-bytes: a bundle past the
// budget is enforced but not persisted, and the metric says so.
func TestPersistenceIsBounded(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	a := doc(t, 3004)
	s.Put(t, bucket, "v1.json", a)
	opts := bundle.Options{URL: s.URL(), Source: rootCreds(), Attempts: 1, Dir: t.TempDir(), CacheMaxBytes: int64(len(a) - 1)}
	f, m := fetcher(t, opts)
	if res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v1.json", sum(a)); err != nil || res.State != bundle.StateFresh {
		t.Fatalf("%s %v", res.State, err)
	}
	if got := testutil.ToFloat64(m.StoreErrors); got < 1 {
		t.Fatalf("store errors %v, want the refused write counted", got)
	}
	if got := testutil.ToFloat64(m.StoredBytes); got != 0 {
		t.Fatalf("stored bytes %v, want 0", got)
	}
}

func TestProgrammedCondition(t *testing.T) {
	fresh := bundle.Result{State: bundle.StateFresh, Location: "s3://b/k", SHA256: "x"}
	if st, reason, _ := bundle.Programmed(fresh, nil); st != metav1.ConditionTrue || reason != bundle.ReasonProgrammed {
		t.Fatalf("fresh: %s %s", st, reason)
	}
	ie := &bundle.IntegrityError{Location: "s3://b/k2", Want: "a"}
	stale := bundle.Result{State: bundle.StateStale, Location: "s3://b/k", SHA256: "x"}
	if st, reason, msg := bundle.Programmed(stale, ie); st != metav1.ConditionFalse || reason != bundle.ReasonStaleBundle ||
		!strings.Contains(msg, "s3://b/k ") || !strings.Contains(msg, bundle.ReasonIntegrityError) {
		t.Fatalf("stale: %s %s %q", st, reason, msg)
	}
	if st, reason, _ := bundle.Programmed(bundle.Result{State: bundle.StateMissing}, ie); st != metav1.ConditionFalse || reason != bundle.ReasonIntegrityError {
		t.Fatalf("cold miss: %s %s", st, reason)
	}
}
