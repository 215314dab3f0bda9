// Package engine evaluates compiled rules against objects. Rules are indexed
// by group and kind so an object only meets the rules that match it, and a
// rule set is swapped atomically so evaluation never waits on a reload.
package engine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/context/pod"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/reuse"
)

// ErrInvalidObject marks an Evaluate error caused by the object itself: a
// field its kind defines (a pod template) has the wrong shape. The API server
// never sends such an object, so a caller can tell input it should refuse
// from a failure of its own.
var ErrInvalidObject = errors.New("the object does not have the shape of its kind")

// Rule is a rule ready to evaluate: its expression and message compiled, its
// match criteria indexed.
type Rule struct {
	*core.Rule
	program         core.Program
	message         template
	selector        labels.Selector
	containerScoped bool
	// binders are the engine's binders whose names the rule reads.
	binders []Binder
	lookups []core.Lookup
}

// Lookups lists the cluster.* reads the rule's expression and message make.
func (r *Rule) Lookups() []core.Lookup { return r.lookups }

// ContainerScoped reports whether the rule is evaluated once per container.
func (r *Rule) ContainerScoped() bool { return r.containerScoped }

// Engine evaluates rules. It is safe for concurrent use.
type Engine struct {
	expr     core.ExpressionEngine
	builders []ContextBuilder
	binders  []Binder
	rules    atomic.Pointer[ruleSet]
	budget   atomic.Pointer[BudgetReporter]

	exceptions        atomic.Pointer[exceptionSet]
	exceptionReporter atomic.Pointer[ExceptionReporter]
	// clock tells exceptions' expiry.
	clock clock.PassiveClock
}

// A Binder binds one top-level name whose value depends on the rule being
// evaluated, not only on the object: `cluster`, whose lookups are confined
// to the rule's namespace and recorded against the rule. The pod context
// builder binds the names that depend on the object alone.
type Binder interface {
	// Name is the top-level name it binds.
	Name() string
	// Bind returns the value of the name for r's evaluation of obj. It
	// must not block: work belongs in the value's methods, which run under
	// the evaluation's budget.
	Bind(ctx context.Context, r *Rule, obj *unstructured.Unstructured, opts Options) any
}

// A ContextBuilder binds the names that depend on the object alone, for the
// kinds it supports: the pod sugar. Every object also gets object,
// metadata and request. It declares the names only it binds, so a rule
// that reads one of them but matches a kind it does not support fails to
// compile instead of reading nil on every object.
type ContextBuilder interface {
	core.ContextBuilder
	// Names lists the top-level names it binds beyond object, metadata
	// and request.
	Names() []string
	// Describe names the kinds it supports, for errors ("pod-shaped
	// kinds").
	Describe() string
}

// WithContextBuilder adds a context builder; the first that supports a kind
// builds its objects' environment.
func WithContextBuilder(b ContextBuilder) Option {
	return func(e *Engine) { e.builders = append(e.builders, b) }
}

// Option configures an Engine.
type Option func(*Engine)

// WithBinder adds a binder. Each name has at most one binder; a later one
// replaces an earlier one.
func WithBinder(b Binder) Option {
	return func(e *Engine) {
		e.binders = slices.DeleteFunc(e.binders, func(x Binder) bool { return x.Name() == b.Name() })
		e.binders = append(e.binders, b)
	}
}

// BudgetReporter hears of every evaluation its budget stopped (too many
// operations or bytes, or the request's deadline): *rule.BudgetStatus
// counts, logs and writes it to the rule's status. It must not block.
type BudgetReporter interface {
	BudgetExceeded(r *core.Rule, ref core.ResourceRef, err error)
}

// ReportBudget sends every budget error to r from now on; nil stops it.
func (e *Engine) ReportBudget(r BudgetReporter) {
	if r == nil {
		e.budget.Store(nil)
		return
	}
	e.budget.Store(&r)
}

type ruleSet struct {
	all   []*Rule
	index *scoped[*Rule]
}

// A nameDeclarer is an expression engine that must know the top-level names
// before it compiles (expr-lang checks identifiers against a declared
// environment). Declare returns one that knows exactly names.
type nameDeclarer interface {
	Declare(names []string) core.ExpressionEngine
}

// New returns an engine with no rules that compiles with expr. The pod
// context builder is always there; options add builders and binders. An
// expression engine that needs the top-level names up front is given
// Names.
func New(expr core.ExpressionEngine, opts ...Option) *Engine {
	e := &Engine{expr: expr, builders: []ContextBuilder{pod.Builder{}}, clock: clock.RealClock{}}
	for _, o := range opts {
		o(e)
	}
	if d, ok := expr.(nameDeclarer); ok {
		e.expr = d.Declare(e.Names())
	}
	e.rules.Store(&ruleSet{index: newScoped[*Rule]()})
	e.exceptions.Store(&exceptionSet{index: newScoped[*Exception]()})
	return e
}

// Names lists the top-level names the engine binds: object, metadata and
// request for every object, and the names of its context builders and
// binders.
func (e *Engine) Names() []string {
	names := append(pod.GenericNames(), event.Name)
	for _, b := range e.builders {
		names = append(names, b.Names()...)
	}
	for _, b := range e.binders {
		names = append(names, b.Name())
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Compile prepares r for evaluation. It fails when the expression or the
// message does not compile, or when the rule reads pod sugar but matches a
// kind that has no pod.
func (e *Engine) Compile(r *core.Rule) (*Rule, error) {
	if len(r.Match.GVKs) == 0 {
		return nil, fmt.Errorf("rule %q: match.gvk is empty: list the kinds the rule applies to", r.Name)
	}
	prog, err := e.expr.Compile(r.Expression)
	if err == nil {
		err = checkMembers(prog)
	}
	if err == nil {
		err = checkBoolean(prog)
	}
	if err != nil {
		return nil, fmt.Errorf("rule %q: compile expression: %w", r.Name, inField("rule", 0, err))
	}
	msg, err := compileTemplate(e.expr, r.Message, checkMembers)
	if err != nil {
		return nil, fmt.Errorf("rule %q: compile message: %w", r.Name, err)
	}
	ids := prog.Identifiers()
	containerScoped := slices.Contains(ids, "container")
	msgIDs := msg.identifiers()
	if slices.Contains(msgIDs, "container") && !containerScoped {
		return nil, fmt.Errorf("rule %q: message reads container, but the rule is not evaluated per container (its expression does not read container)", r.Name)
	}
	if err := e.checkBuilderNames(r, slices.Concat(ids, msgIDs)); err != nil {
		return nil, err
	}
	if slices.Contains(slices.Concat(ids, msgIDs), event.Name) && (len(r.Modes) != 1 || r.Modes[0] != core.ModeRuntime) {
		// Admission and audit have no event: the rule would read nil there.
		return nil, fmt.Errorf("rule %q: reads event, which only runtime evaluation binds: set mode to [runtime]", r.Name)
	}
	sel := labels.Everything()
	if r.Match.LabelSelector != nil {
		if sel, err = metav1.LabelSelectorAsSelector(r.Match.LabelSelector); err != nil {
			return nil, fmt.Errorf("rule %q: match.labelSelector: %w", r.Name, err)
		}
	}
	for _, p := range append(slices.Clone(r.Match.Namespaces.Include), r.Match.Namespaces.Exclude...) {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("rule %q: match.namespaces pattern %q: %w", r.Name, p, err)
		}
	}
	if err := checkOwnNamespace(r); err != nil {
		return nil, err
	}
	out := &Rule{
		Rule:            r,
		program:         prog,
		message:         msg,
		selector:        sel,
		containerScoped: containerScoped,
		lookups:         append(lookupsOf(prog), msg.lookups()...),
	}
	all := slices.Concat(ids, msgIDs)
	for _, b := range e.binders {
		if slices.Contains(all, b.Name()) {
			out.binders = append(out.binders, b)
		}
	}
	return out, nil
}

// lookupLister is implemented by programs that know the cluster.* reads
// they make.
type lookupLister interface {
	Lookups() []core.Lookup
}

func lookupsOf(p core.Program) []core.Lookup {
	if l, ok := p.(lookupLister); ok {
		return l.Lookups()
	}
	return nil
}

// checkBuilderNames rejects a rule that reads a name only a context builder
// binds (pod sugar) but matches a kind that builder does not support: the
// name would always be nil there, which is never what the author meant.
func (e *Engine) checkBuilderNames(r *core.Rule, ids []string) error {
	for _, b := range e.builders {
		for _, id := range b.Names() {
			if !slices.Contains(ids, id) {
				continue
			}
			for _, g := range r.Match.GVKs {
				if !b.Supports(schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}) {
					return fmt.Errorf("rule %q: reads %q, which only %s have, but matches %s: use object.* for it or narrow match.gvk", r.Name, id, b.Describe(), g)
				}
			}
		}
	}
	return nil
}

// SetRules replaces the rule set. Evaluations already running finish with the
// rules they started with.
func (e *Engine) SetRules(rules []*Rule) {
	set := &ruleSet{all: rules, index: newScoped[*Rule]()}
	for i, r := range rules {
		for _, g := range r.Match.GVKs {
			set.index.add(schema.GroupKind{Group: g.Group, Kind: g.Kind}, r.Namespace, i, r)
		}
	}
	e.rules.Store(set)
}

// Rules returns the current rule set.
func (e *Engine) Rules() []*Rule { return e.rules.Load().all }

// GVKs returns the kinds the enabled rules of mode m match ("" for any mode).
func (e *Engine) GVKs(m core.Mode) []core.GVK {
	var out []core.GVK
	for _, r := range e.rules.Load().all {
		if !r.Enabled || (m != "" && !r.HasMode(m)) {
			continue
		}
		for _, g := range r.Match.GVKs {
			if !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
	}
	return out
}

// GVKNamespaces returns the kinds the enabled rules of mode m match, each
// with where: nil when a cluster-wide rule (PortalClusterRule or file) matches
// it, else the sorted namespaces of the namespaced rules (PortalRule) that
// match it, which never act outside their own namespace.
func (e *Engine) GVKNamespaces(m core.Mode) map[core.GVK][]string {
	out := map[core.GVK][]string{}
	cluster := map[core.GVK]bool{}
	for _, r := range e.rules.Load().all {
		if !r.Enabled || (m != "" && !r.HasMode(m)) {
			continue
		}
		for _, g := range r.Match.GVKs {
			switch {
			case r.Namespace == "":
				cluster[g] = true
				out[g] = nil
			case !cluster[g] && !slices.Contains(out[g], r.Namespace):
				out[g] = append(out[g], r.Namespace)
			}
		}
	}
	for g := range out {
		slices.Sort(out[g])
	}
	return out
}

// Options select which rules run and what they see.
type Options struct {
	// Mode limits evaluation to rules with this mode; empty runs every rule.
	Mode core.Mode
	// Request is bound as request.* (admission only).
	Request *core.Request
	// Event is bound as event.* (runtime only; nil elsewhere).
	Event map[string]any
	// NamespacedEvent, when set, is bound as event.* for namespaced rules
	// (PortalRule) instead of Event: what a namespace's rule author may
	// not read of other users' requests is left out of it. Called once,
	// when the first namespaced rule runs.
	NamespacedEvent func() map[string]any
	// RuntimeEvents are the classes of the runtime event evaluated: a rule
	// of mode runtime runs only when it lists one of them (or any).
	RuntimeEvents []string
	// Reuse, when set, is where the object's rule environment takes its
	// maps from and hands them back to before EvaluateAppend returns
	// (portal eval's workers, one each: a Pool is not for concurrent use).
	Reuse *reuse.Pool
}

// Evaluate runs every enabled rule that matches obj and returns one result per
// rule, or one per failing container for container-scoped rules. obj is not
// modified.
//
// Every rule evaluation stops with an error result when it runs out of its
// budget or ctx ends (the admission request's deadline, an audit worker's);
// the rules after it are not evaluated once ctx has ended, and each reports
// the same error.
func (e *Engine) Evaluate(ctx context.Context, obj *unstructured.Unstructured, opts Options) ([]core.Result, error) {
	return e.EvaluateAppend(ctx, obj, opts, nil)
}

// EvaluateAppend is Evaluate writing the results into dst's array when it
// has room for one result per candidate rule (the caller is done with what
// it held): `portal eval` reuses one slice per worker, where a new one was a
// quarter of the bytes evaluating a pod allocated.
func (e *Engine) EvaluateAppend(ctx context.Context, obj *unstructured.Unstructured, opts Options, dst []core.Result) ([]core.Result, error) {
	gvk := obj.GroupVersionKind()
	candidates := e.rules.Load().index.candidates(gvk.GroupKind(), obj.GetNamespace())
	if len(candidates) == 0 {
		return nil, nil
	}
	var (
		ectx    *core.EvalContext
		builder core.ContextBuilder
		nsEvent map[string]any
		results []core.Result
		ref     = core.ResourceRef{APIVersion: obj.GetAPIVersion(), Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: string(obj.GetUID())}
		xs      = e.exceptions.Load().index.candidates(gvk.GroupKind(), obj.GetNamespace())
		now     time.Time
		held    map[*Exception]bool
		// acct is each rule's budget on this object in turn: one for all
		// of them, as the program behind an interface makes it escape.
		acct *core.Account
	)
	if len(xs) > 0 {
		now, held = e.clock.Now(), map[*Exception]bool{}
	}
	// eventFor is event.* for what a namespace's author wrote (a PortalRule,
	// a PortalException's condition): the view without other users' groups,
	// addresses and authorization annotations, when the caller gives one.
	eventFor := func(namespaced bool) any {
		if !namespaced || opts.NamespacedEvent == nil {
			return opts.Event
		}
		if nsEvent == nil {
			nsEvent = opts.NamespacedEvent()
		}
		return nsEvent
	}
	for _, r := range candidates {
		if !r.matches(obj, gvk, opts.Mode) || (opts.Request != nil && opts.Request.Operation != "" && !r.Match.ChecksOperation(opts.Request.Operation)) ||
			(opts.Mode == core.ModeRuntime && !r.wantsEvent(opts.RuntimeEvents)) {
			continue
		}
		if ectx == nil {
			var err error
			if ectx, builder, err = e.buildContext(obj, opts.Request, opts.Reuse); err != nil {
				return nil, fmt.Errorf("build context for %s %s/%s: %w: %w", gvk.Kind, ref.Namespace, ref.Name, ErrInvalidObject, err)
			}
			acct = new(core.Account)
			// One result per candidate is the usual count: growing from
			// empty instead allocated about three times the bytes, the
			// largest share of what evaluating an object allocates.
			if results = dst[:0]; cap(results) < len(candidates) {
				results = make([]core.Result, 0, len(candidates))
			}
		}
		n := len(results)
		var x *Exception
		if len(xs) > 0 {
			var actionsOnly bool
			if x, actionsOnly = e.exemption(ctx, xs, r, obj, gvk, opts.Mode, ectx, ref, now, held, eventFor); x != nil && !actionsOnly {
				results = append(results, skipped(r, ref, x))
				e.reportApplied(x, r)
				continue
			}
		}
		for _, b := range r.binders {
			ectx.Env[b.Name()] = b.Bind(ctx, r, obj, opts)
		}
		// After the exceptions' conditions, which each bind their own view.
		setEvent(ectx.Env, eventFor(r.Namespace != ""))
		results = r.evaluate(ctx, ectx, ref, results, acct)
		for _, b := range r.binders {
			delete(ectx.Env, b.Name())
		}
		e.reportBudget(results[n:])
		if x != nil {
			e.keepActionsOff(results[n:], x, r)
		}
	}
	if ectx != nil && opts.Reuse != nil {
		// The results hold strings, never the environment's maps.
		builder.Release(ectx, opts.Reuse)
	}
	return results, nil
}

func (e *Engine) reportBudget(results []core.Result) {
	rep := e.budget.Load()
	if rep == nil {
		return
	}
	for i := range results {
		// A failing result carries the budget error of a message hole.
		if res := &results[i]; res.Err != nil && errors.Is(res.Err, core.ErrBudgetExceeded) {
			(*rep).BudgetExceeded(res.Rule, res.Resource, res.Err)
			// One report per rule and object: the containers of a
			// container-scoped rule share the budget's cause.
			return
		}
	}
}

// buildContext builds obj's environment, with the builder that made it.
func (e *Engine) buildContext(obj *unstructured.Unstructured, req *core.Request, p *reuse.Pool) (*core.EvalContext, core.ContextBuilder, error) {
	gvk := obj.GroupVersionKind()
	var b core.ContextBuilder = pod.Generic{}
	for _, cb := range e.builders {
		if cb.Supports(gvk) {
			b = cb
			break
		}
	}
	var maps core.Maps
	if p != nil {
		maps = p
	}
	ec, err := b.Build(obj, req, maps)
	return ec, b, err
}

// MaxResultsPerRule bounds the failing results of one rule on one object: a
// container-scoped rule stops at the tenth failing container, whose message
// says so. One pod of 50,000 containers would otherwise make 50,000 results,
// messages, log lines and action verdicts.
const MaxResultsPerRule = 10

// evaluate appends r's verdict on one object to out. Every container of a
// container-scoped rule draws on one budget: the rule's on this object,
// acct, which starts empty.
func (r *Rule) evaluate(ctx context.Context, ectx *core.EvalContext, ref core.ResourceRef, out []core.Result, acct *core.Account) []core.Result {
	*acct = core.Account{}
	if !r.containerScoped {
		return append(out, r.verdict(ctx, ectx.Env, ref, nil, acct))
	}
	n := len(out)
	for i := range ectx.Containers {
		c := &ectx.Containers[i]
		ectx.Env["container"] = c.Sugar
		res := r.verdict(ctx, ectx.Env, ref, c, acct)
		if res.Outcome == core.OutcomePass {
			continue
		}
		if len(out)-n == MaxResultsPerRule-1 && i < len(ectx.Containers)-1 {
			res.Message = withNote(res.Message, fmt.Sprintf(" [%d more containers not evaluated: at most %d results per rule and object]", len(ectx.Containers)-1-i, MaxResultsPerRule))
			out = append(out, res)
			break
		}
		out = append(out, res)
		if res.Err != nil && errors.Is(res.Err, core.ErrBudgetExceeded) {
			// The budget is the rule's on this object: the containers
			// after it would fail the same way.
			break
		}
	}
	ectx.Env["container"] = nil
	if len(out) == n {
		out = append(out, core.Result{Rule: r.Rule, Resource: ref, Outcome: core.OutcomePass})
	}
	return out
}

// verdict evaluates r once, drawing on acct: the expression and every hole
// of the message share it.
func (r *Rule) verdict(ctx context.Context, env core.Env, ref core.ResourceRef, c *core.Container, acct *core.Account) core.Result {
	res := core.Result{Rule: r.Rule, Resource: ref}
	if c != nil {
		res.Container, res.ContainerType = c.Name, c.Type
	}
	v, err := r.program.EvalShared(ctx, env, acct)
	env, v, err = forPrinting(env, v, err) // a Secret's values never reach a message
	switch b, isBool := v.(bool); {
	case err != nil:
		// An error can quote the value it failed on (a megabyte string
		// that does not parse as a number).
		res.Outcome, res.Message, res.Err = core.OutcomeError, bounded(err.Error()), err
	case v == nil || (isBool && !b):
		// A rule that reads a missing field evaluates to nil: nothing is
		// flagged.
		res.Outcome = core.OutcomePass
	case isBool:
		res.Outcome = core.OutcomeFail
		res.Message, res.Err = r.message.render(ctx, env, r.Name, acct)
	default:
		res.Outcome = core.OutcomeError
		got := capped{max: MaxHoleBytes}
		printValue(&got, v)
		res.Message = fmt.Sprintf("rule must evaluate to a boolean, got %T (%s)", v, got.String())
	}
	return res
}
