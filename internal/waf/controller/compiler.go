// Package controller holds the RuleSet controllers: the Compiler, which
// runs on every replica and fills that replica's rule set cache, and the
// StatusWriter, which runs on the leader and reports what its Compiler did.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/driver"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// State is what the Compiler made of one RuleSet; the StatusWriter writes it
// to the RuleSet's status.
type State struct {
	// Generation is the RuleSet generation processed; Allow is whether it
	// carried the allow-unsupported-rules annotation.
	Generation int64
	Allow      bool
	// Reason is RulesCached when the current inputs are served, else why
	// not: InvalidRuleSet, SandboxViolation, RuleSourceNotFound,
	// RuleDataNotFound, DuplicateReference, TooLarge or CompileTimeout.
	// Message and Error say more.
	Reason  string
	Message string
	Error   *wafv1alpha1.RuleError
	// Revision is what the cache serves, possibly from earlier inputs; nil
	// when nothing has compiled yet. RuleCount and Findings describe it.
	Revision  *wafv1alpha1.Revision
	RuleCount int
	Findings  []ruleset.Finding

	// inputs is the digest of the last bundle compiled, good or bad.
	inputs string
}

// Compiler loads each RuleSet's RuleSources and RuleData, compiles them in
// the sandbox and puts each new revision in the cache. It runs on every
// replica, leader or not, because every replica serves its own cache. A
// bundle that fails leaves the previous revision in the cache; an unchanged
// bundle creates no revision.
type Compiler struct {
	client  client.Reader
	cache   *cache.Cache
	log     *slog.Logger
	metrics *Metrics
	opts    CompilerOptions
	slots   *slots

	mu     sync.Mutex
	states map[types.NamespacedName]State
	// kept holds the last good WAF of each RuleSet, within a byte budget.
	kept *lastGood
	// changed tells the StatusWriter that a state moved.
	changed chan event.GenericEvent
}

// NewCompiler returns a compiler reading through c (the manager's cache) and
// filling cc. m may be nil; zero fields of opts take their defaults.
func NewCompiler(c client.Reader, cc *cache.Cache, log *slog.Logger, m *Metrics, opts CompilerOptions) *Compiler {
	if m == nil {
		m = NewMetrics(nil)
	}
	opts = opts.withDefaults()
	return &Compiler{
		client: c, cache: cc, log: log, metrics: m, opts: opts,
		slots:   newSlots(opts.Concurrency),
		states:  map[types.NamespacedName]State{},
		kept:    newLastGood(opts.MaxLastGoodBytes, m),
		changed: make(chan event.GenericEvent, 1024),
	}
}

// State returns what the compiler made of a RuleSet.
func (c *Compiler) State(key types.NamespacedName) (State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.states[key]
	return s, ok
}

// specOrAnnotations passes RuleSet events that change what the controllers
// act on: the spec (generation) or the allow-unsupported-rules annotation.
func specOrAnnotations() predicate.Predicate {
	return predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{})
}

// SetupWithManager registers the compiler. It watches RuleSets, and the
// RuleSources and RuleData they name through the field indexes of
// SetupIndexes. It does not need leader election.
func (c *Compiler) SetupWithManager(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("waf-ruleset-compiler").
		For(&wafv1alpha1.RuleSet{}, builder.WithPredicates(specOrAnnotations())).
		Watches(&wafv1alpha1.RuleSource{}, handler.EnqueueRequestsFromMapFunc(referrers(mgr.GetCache(), IndexSources))).
		Watches(&wafv1alpha1.RuleData{}, handler.EnqueueRequestsFromMapFunc(referrers(mgr.GetCache(), IndexData))).
		// Workers beyond the compile slots keep cheap reconciles (missing
		// references, unchanged inputs) moving while compiles run.
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: c.opts.Concurrency + 2}).
		Complete(c)
	if err != nil {
		return fmt.Errorf("set up RuleSet compiler: %w", err)
	}
	return nil
}

// slotRetry is how soon a RuleSet waiting for a compile slot looks again.
const slotRetry = time.Second

// Reconcile compiles one RuleSet.
func (c *Compiler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rs wafv1alpha1.RuleSet
	if err := c.client.Get(ctx, req.NamespacedName, &rs); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	b, rej, err := c.load(ctx, &rs)
	if err != nil {
		return ctrl.Result{}, err
	}
	c.mu.Lock()
	st := c.states[req.NamespacedName]
	c.mu.Unlock()
	st.Generation, st.Allow = rs.Generation, rs.Annotations[wafv1alpha1.AnnotationAllowUnsupportedRules] == "true"
	var result string
	switch {
	case rej != nil:
		st.Reason, st.Message, st.Error, st.inputs = rej.reason, rej.message, &wafv1alpha1.RuleError{Message: rej.message}, ""
		result = rej.result
	case b.SHA256() == st.inputs:
		result = ResultUnchanged
	default:
		release, ok := c.slots.acquire(req.Namespace)
		if !ok {
			// Every slot this namespace may use is busy: wait without
			// holding a worker, so other namespaces compile meanwhile.
			return ctrl.Result{RequeueAfter: slotRetry}, nil
		}
		result = c.compile(req.NamespacedName, b, &st, release)
	}
	c.metrics.Compiles.WithLabelValues(result).Inc()
	c.mu.Lock()
	c.states[req.NamespacedName] = st
	c.mu.Unlock()
	c.logResult(req.NamespacedName, result, st)
	select {
	case c.changed <- event.GenericEvent{Object: &rs}:
	default: // nobody listens on a replica that is not the leader
	}
	return ctrl.Result{}, nil
}

type compileResult struct {
	compiled *ruleset.Compiled
	err      error
}

// compile compiles b into st within the compile deadline; on success the
// revision goes to the cache. release frees the compile slot: it runs when
// the compile really ends, which for a compile past its deadline is after
// compile returns, so abandoned compiles still count against the slots.
func (c *Compiler) compile(key types.NamespacedName, b ruleset.Bundle, st *State, release func()) string {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.CompileTimeout)
	defer cancel()
	done := make(chan compileResult, 1)
	c.metrics.InFlight.Inc()
	start := time.Now()
	go func() {
		defer c.metrics.InFlight.Dec()
		defer release()
		var r compileResult
		defer func() {
			// Outside the reconciler, a panic would end the process.
			if p := recover(); p != nil {
				r = compileResult{err: fmt.Errorf("compile: %v", p)}
			}
			done <- r
		}()
		r.compiled, r.err = c.opts.Compile(ctx, b, ruleset.Options{MaxDataFileBytes: c.opts.MaxDataFileBytes})
	}()
	var r compileResult
	select {
	case r = <-done:
	case <-ctx.Done():
		// Coraza stops at its next file read; what it makes is dropped.
		go func() {
			if late := <-done; late.compiled != nil {
				_ = late.compiled.Close()
			}
		}()
		r.err = ctx.Err()
	}
	c.metrics.Duration.Observe(time.Since(start).Seconds())
	st.inputs = b.SHA256()
	if r.err != nil {
		return c.failed(st, r.err)
	}
	compiled := r.compiled
	entry, _ := c.cache.Put(cache.Key(key.Namespace, key.Name), ruleset.RevisionUUID(compiled.SHA256), b.Rules, b.DataFiles)
	st.Reason, st.Message, st.Error = wafv1alpha1.ReasonRulesCached, "", nil
	st.Revision = &wafv1alpha1.Revision{UUID: entry.UUID, Timestamp: metav1.NewTime(entry.Timestamp), SHA256: compiled.SHA256}
	st.RuleCount = compiled.RuleCount
	st.Findings = nil
	// Every registered driver's limits (internal/waf/driver); the Engine
	// controller's package registers the built-in ones, and Setup links it.
	for _, d := range driver.All() {
		st.Findings = append(st.Findings, compiled.Unsupported(d.Name(), d.Limits())...)
	}
	// Keep the last good WAF open, within --waf-max-last-good-bytes:
	// Coraza shares compiled patterns between live WAFs, so the next compile
	// of a similar bundle is several times faster.
	c.mu.Lock()
	closing := c.kept.keep(key, compiled)
	c.mu.Unlock()
	for _, old := range closing {
		_ = old.Close()
	}
	return ResultCached
}

// failed records why a compile failed and returns the result label.
func (c *Compiler) failed(st *State, err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		err = &ruleset.Error{Problems: []ruleset.Problem{{Kind: ruleset.KindTimeout,
			Message: fmt.Sprintf("the compile did not finish within %s (--waf-compile-timeout); make the rule set smaller or simpler", c.opts.CompileTimeout)}}}
	}
	st.Reason, st.Message, st.Error = wafv1alpha1.ReasonInvalidRuleSet, err.Error(), &wafv1alpha1.RuleError{Message: err.Error()}
	e, ok := ruleset.AsError(err)
	if !ok {
		return ResultInvalid
	}
	p := e.Problems[0]
	st.Error = &wafv1alpha1.RuleError{Source: p.Source, Line: int32(p.SourceLine), Message: p.Message}
	if p.Source == "" && p.Line > 0 {
		st.Error.Line = int32(p.Line)
	}
	switch e.Kind() {
	case ruleset.KindSandbox:
		st.Reason = wafv1alpha1.ReasonSandboxViolation
		return ResultSandbox
	case ruleset.KindTooLarge:
		st.Reason = wafv1alpha1.ReasonTooLarge
		return ResultTooLarge
	case ruleset.KindTimeout:
		// Not a property of the inputs alone: the next reconcile retries.
		st.Reason, st.inputs = wafv1alpha1.ReasonCompileTimeout, ""
		return ResultTimeout
	}
	return ResultInvalid
}

func (c *Compiler) forget(key types.NamespacedName) {
	c.mu.Lock()
	compiled := c.kept.drop(key)
	delete(c.states, key)
	c.mu.Unlock()
	if compiled != nil {
		_ = compiled.Close()
	}
	c.cache.Delete(cache.Key(key.Namespace, key.Name))
	c.log.Info("rule set removed from the cache", "namespace", key.Namespace, "name", key.Name)
}

func (c *Compiler) logResult(key types.NamespacedName, result string, st State) {
	attrs := []any{"namespace", key.Namespace, "name", key.Name, "generation", st.Generation, "result", result}
	if st.Revision != nil {
		attrs = append(attrs, "revision", st.Revision.UUID, "rules", st.RuleCount)
	}
	switch result {
	case ResultUnchanged:
		c.log.Debug("rule set unchanged", attrs...)
	case ResultCached:
		c.log.Info("rule set cached", attrs...)
	default:
		c.log.Warn("rule set not cached", append(attrs, "reason", st.Reason, "error", st.Message)...)
	}
}
