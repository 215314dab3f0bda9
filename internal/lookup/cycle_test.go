package lookup_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/testlog"
)

// pdbWatcher is a watcher over the deployments docs, each evaluated once by
// a rule that lists the PDBs of its namespace, so a PDB change in a
// re-queues them all.
func pdbWatcher(t *testing.T, o lookup.WatcherOptions, docs ...string) (*lookup.Watcher, *engine.Engine) {
	t.Helper()
	mem := memory(t, docs...)
	index := o.Index
	if index == nil {
		index = lookup.NewDepIndex(0)
	}
	l := lookup.New(lookup.Options{Cache: mem, Resolver: mem.(lookup.Resolver), Index: index})
	e := newEngine(t, l, rule("pdb", "", `none(cluster.poddisruptionbudgets.list(object.metadata.namespace, {}), selects(#.spec.selector, object.spec.template.metadata.labels))`, deployGVK))
	for _, obj := range objs(t, docs...) {
		if _, err := e.Evaluate(context.Background(), obj, engine.Options{Mode: core.ModeAudit}); err != nil {
			t.Fatal(err)
		}
	}
	o.Engine, o.Cache, o.Resolver, o.Index = e, mem, mem.(lookup.Resolver), index
	w := lookup.NewWatcher(o)
	t.Cleanup(w.Stop)
	return w, e
}

// stamped records when each re-queue happened, by clock (nil: the real one).
type stamped struct {
	mu    sync.Mutex
	at    []time.Time
	clock clock.PassiveClock
}

func (s *stamped) add() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.clock != nil {
		now = s.clock.Now()
	}
	s.at = append(s.at, now)
}

func (s *stamped) list() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// A true cycle, where every re-evaluation changes what the pair read, is
// slowed to the limit per window by the trailing re-evaluations: it keeps
// going (nothing waits for the resync) but never spins. The windows pass on
// a fake clock, so a loaded machine cannot stretch or squeeze them.
func TestCycleIsRateLimitedNotStopped(t *testing.T) {
	const window = time.Minute
	clk := clocktesting.NewFakeClock(time.Now())
	rq := &stamped{clock: clk}
	feed := make(chan struct{}, 1)
	m := lookup.NewMetrics(nil, nil)
	logs := &testlog.Buffer{}
	w, _ := pdbWatcher(t, lookup.WatcherOptions{Metrics: m, CycleWindow: window, Clock: clk, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Requeuer: lookup.RequeueFunc(func(lookup.ObjectKey) {
			rq.add()
			select {
			case feed <- struct{}{}:
			default:
			}
		})}, depA)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The evaluation's write to what it read: another change at once.
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-feed:
				w.Changed(pdbGVR, "a", "p", nil, labels.Set{})
			}
		}
	}()
	w.Changed(pdbGVR, "a", "p", nil, labels.Set{})
	const windows = 3
	want := windows * lookup.DefaultCycleLimit
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		clk.Step(window / 20)
		return len(rq.list()) >= want && strings.Contains(logs.String(), "(a cycle?)"), nil
	})
	if err != nil {
		t.Fatalf("%d re-evaluations, want the cycle to go on past the first window to %d and be logged as a likely cycle: %v\n%s", len(rq.list()), want, err, logs.String())
	}
	cancel()
	at := rq.list()
	for i := range at {
		n := 0
		for j := i; j < len(at) && at[j].Sub(at[i]) < window; j++ {
			n++
		}
		// One more than the limit allows for the gap between the
		// guard's clock and the requeuer's.
		if n > lookup.DefaultCycleLimit+1 {
			t.Fatalf("%d re-evaluations within %s from re-evaluation %d of %d, want at most %d", n, window, i, len(at), lookup.DefaultCycleLimit+1)
		}
	}
	if n := testutil.ToFloat64(m.CycleSuppressed); n == 0 {
		t.Error("portal_lookup_cycle_suppressed_total did not move")
	}
}

// A burst of changes (four Ingresses applied at once, each read by the
// others' rule) defers a pair once: that is logged at debug level, not as a
// warning about a cycle, which portal dev users read as a fault.
func TestBurstIsNotACycle(t *testing.T) {
	logs := &testlog.Buffer{}
	rq := &stamped{}
	w, _ := pdbWatcher(t, lookup.WatcherOptions{CycleWindow: time.Minute, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Requeuer: lookup.RequeueFunc(func(lookup.ObjectKey) { rq.add() })}, depA)
	for range 2 * lookup.DefaultCycleLimit {
		w.Changed(pdbGVR, "a", "p", nil, labels.Set{})
	}
	if n := len(rq.list()); n != lookup.DefaultCycleLimit {
		t.Errorf("%d re-evaluations, want the limit of %d in the window", n, lookup.DefaultCycleLimit)
	}
	out := logs.String()
	if strings.Contains(out, "level=WARN") || !strings.Contains(out, "level=DEBUG msg=\"lookup re-evaluation deferred: a burst of changes") {
		t.Errorf("a burst: want one debug line about a deferral and no warning, got:\n%s", out)
	}
}

// The pending trailing re-evaluations are bounded; past the bound a pair is
// left to the resync and counted. A pair's pending entry goes when its
// object or its rule does.
func TestCyclePendingIsBoundedAndForgotten(t *testing.T) {
	dep2 := `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d2, namespace: a}, spec: {template: {metadata: {labels: {app: web}}}}}`
	m := lookup.NewMetrics(nil, nil)
	rq := &requeues{}
	w, e := pdbWatcher(t, lookup.WatcherOptions{Metrics: m, Requeuer: rq, CycleWindow: time.Hour, MaxPending: 1}, depA, dep2)
	burst := func() {
		for range lookup.DefaultCycleLimit + 1 {
			w.Changed(pdbGVR, "a", "p", nil, labels.Set{})
		}
	}
	burst()
	if n := testutil.ToFloat64(m.CyclePending); n != 1 {
		t.Fatalf("portal_lookup_cycle_pending = %v, want 1 (the bound)", n)
	}
	if n := testutil.ToFloat64(m.CycleDropped); n != 1 {
		t.Errorf("portal_lookup_cycle_dropped_total = %v, want 1: the second pair did not fit", n)
	}
	for _, name := range []string{"d", "d2"} {
		w.Forget(lookup.ObjectKey{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: "a", Name: name})
	}
	if n := testutil.ToFloat64(m.CyclePending); n != 0 {
		t.Errorf("portal_lookup_cycle_pending = %v after both objects are gone, want 0", n)
	}

	// The objects exist again; the window of their pairs is still full.
	burst()
	if n := testutil.ToFloat64(m.CyclePending); n != 1 {
		t.Fatalf("portal_lookup_cycle_pending = %v, want 1", n)
	}
	e.SetRules(nil)
	w.RulesChanged(context.Background())
	if n := testutil.ToFloat64(m.CyclePending); n != 0 {
		t.Errorf("portal_lookup_cycle_pending = %v after the rule is gone, want 0", n)
	}
}

// The dependency index lets go of what an evaluation read when its object
// is deleted or its rule goes: without that the entries stay until the LRU
// takes them, and every change to what they read requeues a gone object.
func TestIndexForgetsGoneObjectsAndRules(t *testing.T) {
	index := lookup.NewDepIndex(0)
	w, e := pdbWatcher(t, lookup.WatcherOptions{Index: index, Requeuer: &requeues{}}, depA)
	w.RulesChanged(context.Background())
	if index.Len() == 0 {
		t.Fatal("the evaluation recorded nothing in the index")
	}
	w.Forget(lookup.ObjectKey{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: "a", Name: "d"})
	if n := index.Len(); n != 0 {
		t.Errorf("index holds %d entries after the only evaluated object is gone, want 0", n)
	}

	for _, obj := range objs(t, depA) {
		if _, err := e.Evaluate(context.Background(), obj, engine.Options{Mode: core.ModeAudit}); err != nil {
			t.Fatal(err)
		}
	}
	if index.Len() == 0 {
		t.Fatal("the evaluation recorded nothing in the index")
	}
	e.SetRules(nil)
	w.RulesChanged(context.Background())
	if n := index.Len(); n != 0 {
		t.Errorf("index holds %d entries after the rule is gone, want 0", n)
	}
}
