package engine

import (
	"context"
	"fmt"
	"path"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
)

// Exception is an exception ready to apply: its condition compiled and its
// selector parsed.
type Exception struct {
	*core.Exception
	selector  labels.Selector
	condition core.Program
}

// ExceptionReporter hears of every exception that exempted an object from
// a rule, and of every condition that failed to evaluate (the exception then
// does not apply). It must not block.
type ExceptionReporter interface {
	ExceptionApplied(x *core.Exception, r *core.Rule)
	ConditionFailed(x *core.Exception, ref core.ResourceRef, err error)
}

type exceptionSet struct {
	all   []*Exception
	index *scoped[*Exception]
}

// WithClock sets the clock exceptions' expiry is read from; the default is
// the real one.
func WithClock(c clock.PassiveClock) Option {
	return func(e *Engine) { e.clock = c }
}

// ReportExceptions sends every applied exception and failed condition to r
// from now on; nil stops it.
func (e *Engine) ReportExceptions(r ExceptionReporter) {
	if r == nil {
		e.exceptionReporter.Store(nil)
		return
	}
	e.exceptionReporter.Store(&r)
}

// CompileException prepares x: its condition compiles like a rule
// expression, against the kinds x matches, and may not read cluster.*
// (lookups are confined to a rule's namespace and recorded against a rule;
// an exception has neither).
func (e *Engine) CompileException(x *core.Exception) (*Exception, error) {
	if len(x.Match.GVKs) == 0 {
		return nil, fmt.Errorf("exception %s: match.gvk is empty: list the kinds it exempts", x.Ref())
	}
	out := &Exception{Exception: x, selector: labels.Everything()}
	if x.Match.LabelSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(x.Match.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("exception %s: match.labelSelector: %w", x.Ref(), err)
		}
		out.selector = sel
	}
	for _, p := range slices.Concat(x.Match.Names, x.Match.Namespaces.Include, x.Match.Namespaces.Exclude) {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("exception %s: match pattern %q: %w", x.Ref(), p, err)
		}
	}
	if x.Condition == "" {
		return out, nil
	}
	prog, err := e.expr.Compile(x.Condition)
	if err == nil {
		err = checkMembers(prog)
	}
	if err != nil {
		return nil, fmt.Errorf("exception %s: compile condition: %w", x.Ref(), inField("condition", 0, err))
	}
	ids := prog.Identifiers()
	for _, b := range e.binders {
		if slices.Contains(ids, b.Name()) {
			return nil, fmt.Errorf("exception %s: condition reads %s, which an exception's condition cannot: match on the object itself", x.Ref(), b.Name())
		}
	}
	if slices.Contains(ids, "container") {
		return nil, fmt.Errorf("exception %s: condition reads container: an exception exempts whole objects; use pod.* or object.spec", x.Ref())
	}
	r := &core.Rule{Name: "exception " + x.Ref(), Match: core.Match{GVKs: x.Match.GVKs}}
	if err := e.checkBuilderNames(r, ids); err != nil {
		return nil, err
	}
	out.condition = prog
	return out, nil
}

// SetExceptions replaces the exception set. Evaluations already running
// finish with the exceptions they started with.
func (e *Engine) SetExceptions(xs []*Exception) {
	set := &exceptionSet{all: slices.Clone(xs), index: newScoped[*Exception]()}
	for i, x := range xs {
		for _, g := range x.Match.GVKs {
			set.index.add(schema.GroupKind{Group: g.Group, Kind: g.Kind}, x.Namespace, i, x)
		}
	}
	e.exceptions.Store(set)
}

// Exceptions returns the current exception set, in the order SetExceptions
// was given it.
func (e *Engine) Exceptions() []*Exception {
	return slices.Clone(e.exceptions.Load().all)
}

// exemption finds the exception that exempts obj from r in mode m, if any:
// the first in the set, for a stable verdict. actionsOnly is set when the
// exception only keeps r's actions off obj (its modes include actions but
// not m): r is still evaluated.
//
// held caches each condition's verdict on obj, so an exception naming many
// rules evaluates its condition once per object, not once per rule.
//
// eventFor gives the condition of a PortalException the namespaced view of
// event.*, whatever the rule: its author must not learn, from what it
// exempts, who else acted in its namespace.
func (e *Engine) exemption(ctx context.Context, xs []*Exception, r *Rule, obj *unstructured.Unstructured, gvk schema.GroupVersionKind, m core.Mode, ectx *core.EvalContext, ref core.ResourceRef, now time.Time, held map[*Exception]bool, eventFor func(namespaced bool) any) (x *Exception, actionsOnly bool) {
	var actions *Exception
	for _, c := range xs {
		if c.ExpiredAt(now) || !c.NamesRule(r.Rule) || !c.matches(obj, gvk) {
			continue
		}
		inMode := c.AppliesIn(m)
		if !inMode && (actions != nil || !slices.Contains(c.Modes, core.ModeActions)) {
			continue
		}
		ok, seen := held[c]
		if !seen {
			setEvent(ectx.Env, eventFor(c.Namespace != ""))
			ok = e.conditionHolds(ctx, c, ectx, ref)
			held[c] = ok
		}
		if !ok {
			continue
		}
		if inMode {
			return c, false
		}
		actions = c
	}
	return actions, actions != nil
}

// conditionHolds evaluates x's condition on one object under a budget of
// its own. An error (a budget exhausted, a type error) means the exception
// does not apply: a broken condition must never exempt.
func (e *Engine) conditionHolds(ctx context.Context, x *Exception, ectx *core.EvalContext, ref core.ResourceRef) bool {
	if x.condition == nil {
		return true
	}
	var acct core.Account
	v, err := x.condition.EvalShared(ctx, ectx.Env, &acct)
	if err != nil {
		if rep := e.exceptionReporter.Load(); rep != nil {
			(*rep).ConditionFailed(x.Exception, ref, err)
		}
		return false
	}
	b, ok := v.(bool)
	return ok && b
}

func (x *Exception) matches(obj *unstructured.Unstructured, gvk schema.GroupVersionKind) bool {
	if !matchesKindAndNamespace(x.Match.GVKs, x.Match.Namespaces, x.Namespace, obj, gvk) {
		return false
	}
	if len(x.Match.Names) > 0 && !anyGlob(x.Match.Names, obj.GetName()) {
		return false
	}
	return x.selector.Empty() || x.selector.Matches(labels.Set(obj.GetLabels()))
}

// skipped is r's result on an object x exempts it from.
func skipped(r *Rule, ref core.ResourceRef, x *Exception) core.Result {
	return core.Result{
		Rule: r.Rule, Resource: ref, Outcome: core.OutcomeSkip, Exception: x.Exception,
		Message: bounded(fmt.Sprintf("exempted by %s: %s", x.String(), x.Reason)),
	}
}

// setEvent binds event.* for the next evaluation. Outside runtime mode there
// is none: the name stays out of the environment, which reads as nil just
// as a name bound to nil does, instead of being written for every rule (two
// map writes a rule, 4% of evaluating a pod against the pod-security
// bundle).
func setEvent(env core.Env, v any) {
	if v == nil {
		delete(env, event.Name)
		return
	}
	env[event.Name] = v
}

// keepActionsOff marks r's failing results with x, an exception of mode
// actions: the violations stand, their actions do not run.
func (e *Engine) keepActionsOff(results []core.Result, x *Exception, r *Rule) {
	applied := false
	for i := range results {
		if results[i].Outcome == core.OutcomeFail {
			results[i].Exception = x.Exception
			applied = true
		}
	}
	if applied {
		e.reportApplied(x, r)
	}
}

func (e *Engine) reportApplied(x *Exception, r *Rule) {
	if rep := e.exceptionReporter.Load(); rep != nil {
		(*rep).ExceptionApplied(x.Exception, r.Rule)
	}
}
