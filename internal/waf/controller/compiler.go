// Package controller holds the RuleSet controllers: the Compiler, which
// runs on every replica and fills that replica's rule set cache, and the
// StatusWriter, which runs on the leader and reports what its Compiler did.
package controller

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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
	// not: InvalidRuleSet, SandboxViolation, RuleSourceNotFound or
	// RuleDataNotFound. Message and Error say more.
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

	mu       sync.Mutex
	states   map[types.NamespacedName]State
	compiled map[types.NamespacedName]*ruleset.Compiled
	// changed tells the StatusWriter that a state moved.
	changed chan event.GenericEvent
}

// NewCompiler returns a compiler reading through c (the manager's cache) and
// filling cc. m may be nil.
func NewCompiler(c client.Reader, cc *cache.Cache, log *slog.Logger, m *Metrics) *Compiler {
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Compiler{
		client: c, cache: cc, log: log, metrics: m,
		states:   map[types.NamespacedName]State{},
		compiled: map[types.NamespacedName]*ruleset.Compiled{},
		changed:  make(chan event.GenericEvent, 1024),
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
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		Complete(c)
	if err != nil {
		return fmt.Errorf("set up RuleSet compiler: %w", err)
	}
	return nil
}

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
	b, reason, msg, err := c.load(ctx, &rs)
	if err != nil {
		return ctrl.Result{}, err
	}
	c.mu.Lock()
	st := c.states[req.NamespacedName]
	c.mu.Unlock()
	st.Generation, st.Allow = rs.Generation, rs.Annotations[wafv1alpha1.AnnotationAllowUnsupportedRules] == "true"
	var result string
	switch {
	case reason != "":
		st.Reason, st.Message, st.Error, st.inputs = reason, msg, &wafv1alpha1.RuleError{Message: msg}, ""
		result = ResultMissingRefs
	case b.SHA256() == st.inputs:
		result = ResultUnchanged
	default:
		result = c.compile(req.NamespacedName, b, &st)
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

// load reads the RuleSet's sources and data in order. A missing object is a
// reason (RuleSourceNotFound, RuleDataNotFound), not an error.
func (c *Compiler) load(ctx context.Context, rs *wafv1alpha1.RuleSet) (b ruleset.Bundle, reason, msg string, err error) {
	var sources []ruleset.Source
	var missing []string
	for _, ref := range rs.Spec.Sources {
		var src wafv1alpha1.RuleSource
		if err := c.client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: ref.Name}, &src); err != nil {
			if !apierrors.IsNotFound(err) {
				return b, "", "", fmt.Errorf("get RuleSource %s/%s: %w", rs.Namespace, ref.Name, err)
			}
			missing = append(missing, ref.Name)
			continue
		}
		sources = append(sources, ruleset.Source{Name: ref.Name, Rules: src.Spec.Rules})
	}
	if len(missing) > 0 {
		return b, wafv1alpha1.ReasonRuleSourceNotFound, notFound("RuleSource", rs.Namespace, missing), nil
	}
	var data []map[string][]byte
	for _, ref := range rs.Spec.Data {
		var d wafv1alpha1.RuleData
		if err := c.client.Get(ctx, types.NamespacedName{Namespace: rs.Namespace, Name: ref.Name}, &d); err != nil {
			if !apierrors.IsNotFound(err) {
				return b, "", "", fmt.Errorf("get RuleData %s/%s: %w", rs.Namespace, ref.Name, err)
			}
			missing = append(missing, ref.Name)
			continue
		}
		files := make(map[string][]byte, len(d.Spec.Files))
		for name, content := range d.Spec.Files {
			files[name] = []byte(content)
		}
		data = append(data, files)
	}
	if len(missing) > 0 {
		return b, wafv1alpha1.ReasonRuleDataNotFound, notFound("RuleData", rs.Namespace, missing), nil
	}
	return ruleset.Join(sources, data...), "", "", nil
}

func notFound(kind, namespace string, names []string) string {
	return fmt.Sprintf("%s not found in namespace %s: %s", kind, namespace, strings.Join(names, ", "))
}

// compile compiles b into st; on success the revision goes to the cache.
func (c *Compiler) compile(key types.NamespacedName, b ruleset.Bundle, st *State) string {
	start := time.Now()
	compiled, err := ruleset.Compile(b, ruleset.Options{})
	c.metrics.Duration.Observe(time.Since(start).Seconds())
	st.inputs = b.SHA256()
	if err != nil {
		st.Reason, st.Message, st.Error = wafv1alpha1.ReasonInvalidRuleSet, err.Error(), &wafv1alpha1.RuleError{Message: err.Error()}
		result := ResultInvalid
		if e, ok := ruleset.AsError(err); ok {
			if e.Kind() == ruleset.KindSandbox {
				st.Reason, result = wafv1alpha1.ReasonSandboxViolation, ResultSandbox
			}
			p := e.Problems[0]
			st.Error = &wafv1alpha1.RuleError{Source: p.Source, Line: int32(p.SourceLine), Message: p.Message}
			if p.Source == "" && p.Line > 0 {
				st.Error.Line = int32(p.Line)
			}
		}
		return result
	}
	entry, _ := c.cache.Put(cache.Key(key.Namespace, key.Name), ruleset.RevisionUUID(compiled.SHA256), b.Rules, b.DataFiles)
	st.Reason, st.Message, st.Error = wafv1alpha1.ReasonRulesCached, "", nil
	st.Revision = &wafv1alpha1.Revision{UUID: entry.UUID, Timestamp: metav1.NewTime(entry.Timestamp), SHA256: compiled.SHA256}
	st.RuleCount = compiled.RuleCount
	st.Findings = nil
	for _, d := range ruleset.Drivers() {
		st.Findings = append(st.Findings, compiled.Unsupported(d)...)
	}
	// Keep the last good WAF open: Coraza shares compiled patterns between
	// live WAFs, so the next compile of a similar bundle is several times
	// faster.
	c.mu.Lock()
	old := c.compiled[key]
	c.compiled[key] = compiled
	c.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return ResultCached
}

func (c *Compiler) forget(key types.NamespacedName) {
	c.mu.Lock()
	compiled := c.compiled[key]
	delete(c.compiled, key)
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
