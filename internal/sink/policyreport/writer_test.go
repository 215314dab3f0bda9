package policyreport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/core"
)

// recorder stands in for the API server in the writer's unit tests: it
// records every report applied, and lets a test fail or hold the applies of
// one namespace.
type recorder struct {
	mu      sync.Mutex
	applied map[string][]reportsv1alpha2.PolicyReport // by namespace, in order
	fail    map[string]int                            // namespace: applies left to fail
	hold    map[string]chan struct{}                  // namespace: applies wait for it
	started chan string                               // namespace of each apply begun
}

func newRecorder() *recorder {
	return &recorder{
		applied: map[string][]reportsv1alpha2.PolicyReport{},
		fail:    map[string]int{},
		hold:    map[string]chan struct{}{},
		started: make(chan string, 100),
	}
}

func (r *recorder) client() client.Client {
	return interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error { return nil },
		Patch: func(ctx context.Context, _ client.WithWatch, obj client.Object, patch client.Patch, _ ...client.PatchOption) error {
			ns := obj.GetNamespace()
			r.started <- ns
			r.mu.Lock()
			hold := r.hold[ns]
			r.mu.Unlock()
			if hold != nil {
				select {
				case <-hold:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			var rep reportsv1alpha2.PolicyReport
			if err := json.Unmarshal(data, &rep); err != nil {
				return err
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.fail[ns] > 0 {
				r.fail[ns]--
				return errors.New("injected failure")
			}
			r.applied[ns] = append(r.applied[ns], rep)
			return nil
		},
	})
}

func (r *recorder) reports(ns string) []reportsv1alpha2.PolicyReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]reportsv1alpha2.PolicyReport(nil), r.applied[ns]...)
}

// startSink runs a sink against r and returns it with the observations it
// delivered. limits, when given, are MaxResults and MaxBytes.
func startSink(t *testing.T, r *recorder, limits ...int) (*Sink, func() int) {
	t.Helper()
	return startSinkOn(t, r, clock.RealClock{}, limits...)
}

// startSinkOn is startSink on the clock clk.
func startSinkOn(t *testing.T, r *recorder, clk clock.WithTicker, limits ...int) (*Sink, func() int) {
	t.Helper()
	c := r.client()
	o := Options{Client: c, Reader: c, RetryMin: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clk}
	if len(limits) == 2 {
		o.MaxResults, o.MaxBytes = limits[0], limits[1]
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	delivered := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func(time.Time) { mu.Lock(); delivered++; mu.Unlock() })
	}()
	t.Cleanup(func() { cancel(); <-done })
	if err := s.Publish(ctx, core.FindingBatch{Full: true}); err != nil {
		t.Fatal(err)
	}
	return s, func() int { mu.Lock(); defer mu.Unlock(); return delivered }
}

func violation(ns, name string) core.ObjectFindings {
	of := objectFindings(name, 1, "m")
	of.Object.Namespace = ns
	for i := range of.Findings {
		of.Findings[i].Resource.Namespace = ns
	}
	of.Observed = time.Now()
	return of
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// A report whose writes fail is retried until it is written, and holds back
// no other namespace's report meanwhile.
func TestWriteFailureRetriedAlone(t *testing.T) {
	r := newRecorder()
	r.fail["a"] = 3
	fc := clocktesting.NewFakeClock(time.Now())
	s, delivered := startSinkOn(t, r, fc)
	if err := s.Publish(context.Background(), core.FindingBatch{Objects: []core.ObjectFindings{violation("a", "p"), violation("b", "q")}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "report of b", func() bool { return len(r.reports("b")) == 1 })
	// a's retries come as its backoff passes on the sink's clock.
	waitFor(t, "report of a after its failures", func() bool { fc.Step(40 * time.Millisecond); return len(r.reports("a")) == 1 })
	if got := r.reports("a")[0]; len(got.Results) != 1 || got.Summary.Fail != 1 {
		t.Errorf("report of a: %d results, summary fail %d", len(got.Results), got.Summary.Fail)
	}
	waitFor(t, "both changes delivered", func() bool { return delivered() == 2 })
}

// Changes that arrive while a report is being written go out together in
// its next write, with the current content.
func TestChangesDuringWriteCoalesce(t *testing.T) {
	r := newRecorder()
	release := make(chan struct{})
	r.hold["a"] = release
	s, delivered := startSink(t, r)
	ctx := context.Background()
	if err := s.Publish(ctx, core.FindingBatch{Objects: []core.ObjectFindings{violation("a", "p0")}}); err != nil {
		t.Fatal(err)
	}
	if ns := <-r.started; ns != "a" {
		t.Fatalf("first write to %q", ns)
	}
	for i := 1; i <= 5; i++ {
		if err := s.Publish(ctx, core.FindingBatch{Objects: []core.ObjectFindings{violation("a", fmt.Sprintf("p%d", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	waitFor(t, "every change delivered", func() bool { return delivered() == 6 })
	got := r.reports("a")
	if len(got) != 2 {
		t.Fatalf("%d writes of the report, want 2 (the first, then one with the 5 changes made meanwhile)", len(got))
	}
	if n := len(got[1].Results); n != 6 || got[1].Summary.Fail != 6 {
		t.Errorf("second write: %d results, summary fail %d; want 6", n, got[1].Summary.Fail)
	}
}

// One object with more results than a report holds gets a report of its own
// with all of them; only the byte limit cuts results, and the cut is counted.
func TestLargeObjectKeepsItsResults(t *testing.T) {
	r := newRecorder()
	s, delivered := startSink(t, r, 5, 8<<10)
	many := objectFindings("many", 12, "m")
	huge := objectFindings("huge", 40, strings.Repeat("x", 500))
	for _, of := range []*core.ObjectFindings{&many, &huge} {
		of.Object.Namespace = "a"
		for i := range of.Findings {
			of.Findings[i].Resource.Namespace = "a"
		}
		of.Observed = time.Now()
	}
	if err := s.Publish(context.Background(), core.FindingBatch{Objects: []core.ObjectFindings{many, huge}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both objects published", func() bool { return delivered() == 2 })
	byObject := map[string]int{}
	for _, rep := range r.reports("a") {
		if n := len(rep.Results); n > 0 && rep.Summary.Fail != n {
			t.Errorf("report %s: %d results, summary fail %d", rep.Name, n, rep.Summary.Fail)
		}
		if len(rep.Results) > 0 {
			byObject[rep.Results[0].Resources[0].Name] = len(rep.Results)
		}
	}
	if byObject["many"] != 12 {
		t.Errorf("object with 12 results shows %d, want all 12 in its own report", byObject["many"])
	}
	if n := byObject["huge"]; n == 0 || n >= 40 {
		t.Errorf("object of ~40 KB shows %d results in an 8 KiB report, want some, cut", n)
	}
	if got := testutil.ToFloat64(s.Metrics().Dropped); got != float64(40-byObject["huge"]) {
		t.Errorf("portal_policyreport_results_dropped = %v, want %d", got, 40-byObject["huge"])
	}
	// When the object's findings clear, nothing is dropped any more.
	cleared := core.ObjectFindings{Object: huge.Object, Observed: time.Now()}
	if err := s.Publish(context.Background(), core.FindingBatch{Objects: []core.ObjectFindings{cleared}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "dropped back to 0", func() bool { return testutil.ToFloat64(s.Metrics().Dropped) == 0 })
}

// A report whose writes fail is held back by a delay that doubles from
// RetryMin up to RetryMax on the sink's clock, and written once the delay
// has passed on that clock; a write that succeeds ends the backoff.
func TestFailedWriteBacksOffOnTheClock(t *testing.T) {
	r := newRecorder()
	r.fail["a"] = 3
	fc := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	c := r.client()
	s, err := New(Options{Client: c, Reader: c, RetryMin: time.Second, RetryMax: 3 * time.Second, Clock: fc, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := s.Publish(ctx, core.FindingBatch{Full: true, Objects: []core.ObjectFindings{violation("a", "p")}}); err != nil {
		t.Fatal(err)
	}
	// retryIn is how long, on the clock, the failed report of a is held
	// back; false while it is being written or has not failed.
	retryIn := func() (time.Duration, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		sc := s.scopes["a"]
		if sc == nil || len(sc.shards) == 0 || sc.shards[0] == nil || sc.shards[0].inflight || sc.shards[0].retry == nil {
			return 0, false
		}
		return sc.shards[0].retryAt.Sub(fc.Now()), true
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		waitFor(t, fmt.Sprintf("failure %d held back %s", i+1, want), func() bool { d, ok := retryIn(); return ok && d == want })
		if n := len(r.reports("a")); n != 0 {
			t.Fatalf("report of a written during its backoff")
		}
		fc.Step(want)
	}
	waitFor(t, "report of a after its failures", func() bool { return len(r.reports("a")) == 1 })
	if _, failing := retryIn(); failing {
		t.Error("the backoff outlived a successful write")
	}
}
