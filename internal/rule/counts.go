package rule

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// Defaults of CountOptions.
const (
	DefaultCountInterval = 10 * time.Second
	DefaultCountQPS      = 5
	DefaultCountBurst    = 10
)

// CountOptions configure StatusCounts.
type CountOptions struct {
	// Interval is the least time between two writes of one rule's counts.
	// Default DefaultCountInterval.
	Interval time.Duration
	// QPS and Burst are the token bucket every count write takes from, so
	// all rules together write at a bounded rate. Defaults
	// DefaultCountQPS and DefaultCountBurst.
	QPS   float64
	Burst int
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Clock schedules the writes; default the real clock.
	Clock clock.WithTicker
	// Registerer receives portal_rule_status_count_writes_total (nil: not
	// registered).
	Registerer prometheus.Registerer
}

// StatusCounts writes status.evalCount and status.violationCount of the rule
// custom resources. Every replica counts its own evaluations; the leader
// writes. evalCount is cumulative: a new leader continues from the value in
// the status and adds the evaluations it made since it took over.
// violationCount is the number of violations open now (failing findings,
// one per container for container-scoped rules).
//
// Counts change on every evaluation, so writes are bounded twice: each rule
// at most once per Interval, and all rules together by a token bucket.
// Rules loaded from folders have no object and are not counted.
type StatusCounts struct {
	statusWriter
	client   client.Client
	interval time.Duration
	writes   *prometheus.CounterVec

	mu    sync.Mutex
	rules map[countKey]*ruleCounts
}

type countKey struct {
	kind, namespace, name string
}

type ruleCounts struct {
	evals      int64
	violations int64
	// startEvals is evals when this replica took over; base is evalCount
	// in the status then (read at the first write).
	startEvals int64
	base       int64
	baseKnown  bool
	scheduled  bool
	lastWrite  time.Time
	written    [2]int64
}

// NewStatusCounts returns a count writer using c (the manager's client).
func NewStatusCounts(c client.Client, o CountOptions) *StatusCounts {
	if o.Interval <= 0 {
		o.Interval = DefaultCountInterval
	}
	s := &StatusCounts{
		statusWriter: newStatusWriter(writerOptions{name: "portal-rule-counts", qps: o.QPS, burst: o.Burst, clock: o.Clock, log: o.Logger}),
		client:       c, interval: o.Interval,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_rule_status_count_writes_total",
			Help: "Writes of evalCount and violationCount to rule status, by result (ok, error).",
		}, []string{"result"}),
		rules: map[countKey]*ruleCounts{},
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.writes)
	}
	return s
}

func keyOf(r *core.Rule) (countKey, bool) {
	if r == nil || (r.Source.Kind != KindCluster && r.Source.Kind != KindNamespaced) {
		return countKey{}, false
	}
	return countKey{kind: r.Source.Kind, namespace: r.Source.Namespace, name: r.Source.Name}, true
}

// liveKeys returns the keys of the rule objects among rules.
func liveKeys(rules []*engine.Rule) map[countKey]bool {
	live := make(map[countKey]bool, len(rules))
	for _, r := range rules {
		if k, ok := keyOf(r.Rule); ok {
			live[k] = true
		}
	}
	return live
}

// RulesChanged forgets the counts of rule objects no longer in rules.
// Only the leader's writes found deleted rules; on the other replicas a
// tenant creating and deleting rules would otherwise grow the counts by one
// entry per rule ever evaluated. Subscribe it with Index.OnChange.
func (s *StatusCounts) RulesChanged(rules []*engine.Rule) {
	live := liveKeys(rules)
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.rules, func(k countKey, _ *ruleCounts) bool { return !live[k] })
}

// Evaluated counts one evaluation of r on one object.
func (s *StatusCounts) Evaluated(r *core.Rule) {
	k, ok := keyOf(r)
	if !ok {
		return
	}
	s.mu.Lock()
	c := s.countsLocked(k)
	c.evals++
	s.scheduleLocked(k, c)
	s.mu.Unlock()
}

// SetViolations sets the number of open violations of r.
func (s *StatusCounts) SetViolations(r *core.Rule, n int) {
	k, ok := keyOf(r)
	if !ok {
		return
	}
	s.mu.Lock()
	c := s.countsLocked(k)
	if c.violations != int64(n) {
		c.violations = int64(n)
		s.scheduleLocked(k, c)
		// The VIOLATIONS column must follow the reports, not wait out
		// an interval that evaluations keep restarting: a change of the
		// number goes out within violationDelay of the last write (the
		// token bucket still bounds all writes together).
		s.due(k, c.lastWrite, violationDelay)
	}
	s.mu.Unlock()
}

// violationDelay is the least time between two writes of one rule's counts
// when its number of violations changed.
const violationDelay = time.Second

// Counts returns the evaluations this replica counted and the open
// violations of r, for tests and debugging.
func (s *StatusCounts) Counts(r *core.Rule) (evals, violations int64) {
	k, _ := keyOf(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.rules[k]; c != nil {
		return c.evals, c.violations
	}
	return 0, 0
}

func (s *StatusCounts) countsLocked(k countKey) *ruleCounts {
	c := s.rules[k]
	if c == nil {
		c = &ruleCounts{}
		s.rules[k] = c
	}
	return c
}

func (s *StatusCounts) scheduleLocked(k countKey, c *ruleCounts) {
	if c.scheduled {
		return
	}
	c.scheduled = true
	s.due(k, c.lastWrite, s.interval)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader writes.
func (s *StatusCounts) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: it writes counts until ctx ends.
func (s *StatusCounts) Start(ctx context.Context) error {
	s.mu.Lock()
	for _, c := range s.rules {
		c.startEvals, c.baseKnown = c.evals, false
	}
	s.mu.Unlock()
	s.run(ctx, s.write)
	return nil
}

// write patches one rule's counts.
func (s *StatusCounts) write(ctx context.Context, k countKey) {
	obj := newRuleObject(k.kind)
	s.mu.Lock()
	c := s.rules[k]
	if c == nil {
		s.mu.Unlock()
		return
	}
	c.scheduled = false
	needBase := !c.baseKnown
	s.mu.Unlock()

	var base int64
	if needBase {
		if err := s.client.Get(ctx, types.NamespacedName{Namespace: k.namespace, Name: k.name}, obj); err != nil {
			s.done(k, err)
			return
		}
		base = obj.GetRuleStatus().EvalCount
	}
	s.mu.Lock()
	if needBase {
		c.base, c.baseKnown = base, true
	}
	evals, violations := c.base+c.evals-c.startEvals, c.violations
	unchanged := c.written == [2]int64{evals, violations}
	s.mu.Unlock()
	if unchanged {
		return
	}
	obj.SetNamespace(k.namespace)
	obj.SetName(k.name)
	patch := fmt.Appendf(nil, `{"status":{"evalCount":%d,"violationCount":%d}}`, evals, violations)
	err := s.client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
	if err == nil {
		s.mu.Lock()
		c.written = [2]int64{evals, violations}
		s.mu.Unlock()
	}
	s.done(k, err)
}

// done records a write's outcome: a deleted rule is forgotten, a failed
// write is tried again after the interval.
func (s *StatusCounts) done(k countKey, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.rules[k]
	if c == nil {
		return
	}
	c.lastWrite = s.clock.Now()
	switch {
	case err == nil:
		s.writes.WithLabelValues("ok").Inc()
	case apierrors.IsNotFound(err):
		delete(s.rules, k)
	default:
		s.writes.WithLabelValues("error").Inc()
		s.log.Warn("rule counts not written; retrying", "kind", k.kind, "namespace", k.namespace, "name", k.name, "error", err)
		s.scheduleLocked(k, c)
	}
}
