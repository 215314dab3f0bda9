package findings

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vilaca/portal/internal/core"
)

// recordingSink keeps the batches it was given and fails the first fail
// calls.
type recordingSink struct {
	mu      sync.Mutex
	batches []core.FindingBatch
	fail    int
}

func (s *recordingSink) Name() string { return "recording" }

func (s *recordingSink) Publish(_ context.Context, b core.FindingBatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail > 0 {
		s.fail--
		return errors.New("refused")
	}
	s.batches = append(s.batches, b)
	return nil
}

func (s *recordingSink) got() []core.FindingBatch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]core.FindingBatch(nil), s.batches...)
}

// runnables collects what the pipeline adds to the manager.
type runnables []manager.Runnable

func (r *runnables) Add(x manager.Runnable) error { *r = append(*r, x); return nil }

// The sink starts once every producer holds its full state; its first batch
// is that state, of every producer; a failed batch is retried; the lead
// gauge is 1 once the full state is out, and 0 when the sink stops.
func TestRunnerStartsWithEveryProducersFullState(t *testing.T) {
	sink := &recordingSink{fail: 1}
	fc := clocktesting.NewFakeClock(time.Now())
	var added runnables
	p, err := New(&added, Options{Sinks: []core.OutputSink{sink}, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, Clock: fc, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if len(added) != 1 {
		t.Fatalf("%d runnables for one sink", len(added))
	}
	if r, ok := added[0].(manager.LeaderElectionRunnable); !ok || !r.NeedLeaderElection() {
		t.Error("the sink does not run on the leader only")
	}
	auditSynced, netSynced := make(chan struct{}), make(chan struct{})
	audit, _ := p.Register("audit", ProducerOptions{Synced: auditSynced})
	network, _ := p.Register("network", ProducerOptions{Synced: netSynced})
	now := time.Now()
	audit.Set(ref("a"), []core.Finding{fail(ruleA, ref("a"), "", "m", now)}, now)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- added[0].Start(ctx) }()
	close(auditSynced)
	// network has not synced: nothing may be published, or the first full
	// batch would tell the sinks network has no findings.
	network.Set(ref("n"), []core.Finding{fail(ruleB, ref("n"), "", "m", now)}, now)
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 200*time.Millisecond, true, func(context.Context) (bool, error) {
		return len(sink.got()) > 0, nil
	}); err == nil {
		t.Fatal("the sink published before every producer synced")
	}
	close(netSynced)
	// The first try fails; the retry comes after the backoff on the clock.
	err = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		fc.Step(time.Millisecond)
		return len(sink.got()) > 0, nil
	})
	if err != nil {
		t.Fatal("the sink never published")
	}
	first := sink.got()[0]
	if !first.Full || keys(names(first.Objects)) != "audit/a/a/ network/b/n/" {
		t.Errorf("first batch: full=%v %q, want the full state of both producers", first.Full, keys(names(first.Objects)))
	}
	if n := testutil.ToFloat64(p.Metrics().SinkErrors.WithLabelValues("recording")); n != 1 {
		t.Errorf("sink errors = %v, want the 1 refused batch", n)
	}
	if testutil.ToFloat64(p.Metrics().Leader) != 1 {
		t.Error("portal_audit_leader is not 1 with the full state published")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(p.Metrics().Leader) != 0 {
		t.Error("portal_audit_leader is still 1 after the sink stopped")
	}
}

// countingSink fails its first fail calls and counts every call.
type countingSink struct {
	mu          sync.Mutex
	calls, fail int
}

func (s *countingSink) Name() string { return "counting" }

func (s *countingSink) Publish(context.Context, core.FindingBatch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls <= s.fail {
		return errors.New("refused")
	}
	return nil
}

func (s *countingSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// A batch a sink refuses is retried after a delay that doubles from
// MinBackoff up to MaxBackoff, on the pipeline's clock: the retry comes
// when the delay has passed on that clock and not a moment before.
func TestRetryBacksOffOnTheClock(t *testing.T) {
	sink := &countingSink{fail: 4}
	fc := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	var added runnables
	p, err := New(&added, Options{Sinks: []core.OutputSink{sink}, MinBackoff: time.Second, MaxBackoff: 3 * time.Second,
		Clock: fc, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	synced := make(chan struct{})
	close(synced)
	audit, _ := p.Register("audit", ProducerOptions{Synced: synced})
	audit.Set(ref("a"), []core.Finding{fail(ruleA, ref("a"), "", "m", fc.Now())}, fc.Now())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = added[0].Start(ctx) }()

	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for i, delay := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		waitUntil(fmt.Sprintf("attempt %d waits on the clock", i+1), func() bool { return sink.count() == i+1 && fc.HasWaiters() })
		fc.Step(delay - time.Millisecond)
		if !fc.HasWaiters() || sink.count() != i+1 {
			t.Fatalf("retry %d came before its %s delay", i+1, delay)
		}
		fc.Step(time.Millisecond)
		waitUntil(fmt.Sprintf("retry %d after %s", i+1, delay), func() bool { return sink.count() == i+2 })
	}
}
