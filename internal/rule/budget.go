package rule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
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
	client   client.Client
	loader   *CRLoader
	interval time.Duration
	limiter  *rate.Limiter
	log      *slog.Logger
	exceeded *prometheus.CounterVec
	queue    workqueue.TypedDelayingInterface[countKey]

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
	if o.QPS <= 0 {
		o.QPS = DefaultCountQPS
	}
	if o.Burst <= 0 {
		o.Burst = DefaultCountBurst
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	b := &BudgetStatus{
		client: c, loader: l, interval: o.Interval, log: o.Logger,
		limiter: rate.NewLimiter(rate.Limit(o.QPS), o.Burst),
		exceeded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_rule_budget_exceeded_total",
			Help: "Rule evaluations stopped by their budget (operations, bytes, nesting depth or the request's deadline), by rule.",
		}, []string{"rule"}),
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[countKey]{Name: "portal-rule-budget"}),
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
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
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
		b.queue.AddAfter(k, max(b.interval-time.Since(st.lastWrite), 0))
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
	drain(ctx, b.queue, b.write)
	return nil
}

func (b *BudgetStatus) write(ctx context.Context, k countKey) {
	if err := b.limiter.Wait(ctx); err != nil {
		return
	}
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
	st.pending, st.scheduled, st.lastWrite = false, false, time.Now()
	b.mu.Unlock()

	var gen int64
	if b.loader != nil {
		if ls, ok := b.loader.State(k.kind, k.namespace, k.name); ok {
			gen = ls.ActiveGeneration
		}
	}
	patch, err := json.Marshal(map[string]any{
		"apiVersion": policyv1alpha1.GroupVersion.String(),
		"kind":       k.kind,
		"metadata":   map[string]any{"name": k.name, "namespace": k.namespace},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": policyv1alpha1.ConditionBudgetExceeded, "status": "True",
			"reason": reason, "message": msg, "observedGeneration": gen,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}},
	})
	if err != nil {
		return
	}
	obj := newRuleObject(k.kind)
	obj.SetNamespace(k.namespace)
	obj.SetName(k.name)
	err = b.client.Status().Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, patch),
		client.FieldOwner(BudgetFieldOwner), client.ForceOwnership)
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
