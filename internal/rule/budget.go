package rule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// BudgetFieldOwner is the server-side apply field manager of the
// BudgetExceeded condition; the status reconciler owns the rest.
const BudgetFieldOwner = "portal-budget"

// BudgetOptions configure BudgetStatus.
type BudgetOptions struct {
	// Interval is the least time between two writes of one rule's
	// condition. Default DefaultCountInterval.
	Interval time.Duration
	// QPS and Burst bound all condition writes together. Defaults
	// DefaultCountQPS and DefaultCountBurst.
	QPS   float64
	Burst int
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Clock schedules the writes and stamps the condition; default the
	// real clock.
	Clock clock.WithTicker
	// Registerer receives portal_rule_budget_exceeded_total (nil: not
	// registered).
	Registerer prometheus.Registerer
}

// BudgetStatus hears of every rule evaluation stopped by its budget (it is an
// engine.BudgetReporter): it counts it in portal_rule_budget_exceeded_total,
// logs it, and sets the rule's BudgetExceeded condition to the last one.
// A rule that exceeds its budget on every request is written at most once
// per Interval, and all rules together at a bounded rate, so a hostile rule
// cannot turn its evaluations into API server writes. It runs on every
// replica: admission evaluates on all of them.
type BudgetStatus struct {
	statusWriter
	client   client.Client
	loader   *CRLoader
	interval time.Duration
	exceeded *prometheus.CounterVec

	mu    sync.Mutex
	rules map[countKey]*budgetState
}

type budgetState struct {
	reason, message string
	pending         bool
	scheduled       bool
	lastWrite       time.Time
}

// NewBudgetStatus returns a budget reporter writing with c; l tells it each
// rule's active generation.
func NewBudgetStatus(c client.Client, l *CRLoader, o BudgetOptions) *BudgetStatus {
	if o.Interval <= 0 {
		o.Interval = DefaultCountInterval
	}
	b := &BudgetStatus{
		statusWriter: newStatusWriter(writerOptions{name: "portal-rule-budget", qps: o.QPS, burst: o.Burst, clock: o.Clock, log: o.Logger}),
		client:       c, loader: l, interval: o.Interval,
		exceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_rule_budget_exceeded_total",
			Help: "Rule evaluations stopped by their budget (operations, bytes, nesting depth or the request's deadline), by rule.",
		}, []string{"rule"}),
		rules: map[countKey]*budgetState{},
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(b.exceeded)
	}
	return b
}

// Exceeded returns the counter, for tests.
func (b *BudgetStatus) Exceeded() *prometheus.CounterVec { return b.exceeded }

// RulesChanged forgets the budget records of rule objects no longer in
// rules: a record is otherwise dropped only when a write finds its rule
// gone, so every rule that ran out of budget once and was deleted after
// its condition was written would stay. Subscribe it with Index.OnChange.
func (b *BudgetStatus) RulesChanged(rules []*engine.Rule) {
	live := liveKeys(rules)
	b.mu.Lock()
	defer b.mu.Unlock()
	maps.DeleteFunc(b.rules, func(k countKey, _ *budgetState) bool { return !live[k] })
}

// BudgetExceeded implements engine.BudgetReporter. It never blocks.
func (b *BudgetStatus) BudgetExceeded(r *core.Rule, ref core.ResourceRef, err error) {
	b.exceeded.WithLabelValues(r.MetricLabel()).Inc()
	reason := budgetReason(err)
	// expr-lang errors carry the expression and a caret on further lines.
	first, _, _ := strings.Cut(err.Error(), "\n")
	b.log.Warn("rule evaluation stopped by its budget", "rule", r.Name, "source", r.Source.String(),
		"reason", reason, "kind", ref.Kind, "namespace", ref.Namespace, "name", ref.Name, "error", first)
	k, ok := keyOf(r)
	if !ok {
		return
	}
	msg := fmt.Sprintf("evaluation of %s %s stopped: %s", ref.Kind, objectRef(ref), first)
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.rules[k]
	if st == nil {
		st = &budgetState{}
		b.rules[k] = st
	}
	st.reason, st.message, st.pending = reason, msg, true
	if !st.scheduled {
		st.scheduled = true
		b.due(k, st.lastWrite, b.interval)
	}
}

func objectRef(ref core.ResourceRef) string {
	if ref.Namespace == "" {
		return ref.Name
	}
	return ref.Namespace + "/" + ref.Name
}

// budgetReason is the condition reason for a budget error.
func budgetReason(err error) string {
	var be *core.BudgetError
	if !errors.As(err, &be) {
		return policyv1alpha1.ReasonOperationBudget
	}
	switch be.Kind {
	case core.BudgetBytes:
		return policyv1alpha1.ReasonByteBudget
	case core.BudgetDepth:
		return policyv1alpha1.ReasonDepthLimit
	case core.BudgetDeadline:
		return policyv1alpha1.ReasonDeadline
	case core.BudgetAPIReads:
		return policyv1alpha1.ReasonAPIReadBudget
	case core.BudgetPattern:
		return policyv1alpha1.ReasonPatternLimit
	}
	return policyv1alpha1.ReasonOperationBudget
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (b *BudgetStatus) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable: it writes conditions until ctx ends.
func (b *BudgetStatus) Start(ctx context.Context) error {
	b.run(ctx, b.write)
	return nil
}

func (b *BudgetStatus) write(ctx context.Context, k countKey) {
	b.mu.Lock()
	st := b.rules[k]
	if st == nil || !st.pending {
		if st != nil {
			st.scheduled = false
		}
		b.mu.Unlock()
		return
	}
	reason, msg := st.reason, st.message
	st.pending, st.scheduled, st.lastWrite = false, false, b.clock.Now()
	b.mu.Unlock()

	cond := b.condition(policyv1alpha1.ConditionBudgetExceeded, true, reason, msg, activeGeneration(b.loader, k))
	err := b.apply(ctx, b.client, k, BudgetFieldOwner, map[string]any{"conditions": []any{cond}})
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		b.mu.Lock()
		delete(b.rules, k)
		b.mu.Unlock()
	default:
		b.log.Warn("rule budget condition not written; retrying", "kind", k.kind, "namespace", k.namespace, "name", k.name, "error", err)
		b.mu.Lock()
		if st := b.rules[k]; st != nil && !st.scheduled {
			st.pending, st.scheduled = true, true
			b.queue.AddAfter(k, b.interval)
		}
		b.mu.Unlock()
	}
}
