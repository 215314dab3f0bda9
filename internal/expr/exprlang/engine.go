// Package exprlang is Portal's default ExpressionEngine, built on
// github.com/expr-lang/expr. Each expression is compiled once; evaluation runs
// the cached bytecode on a pooled VM. Every evaluation has a budget of
// operations and of bytes it may build, charged by helpers an AST patch puts
// around loops and costly operators (budget.go), and it stops when the
// caller's context ends.
package exprlang

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"

	"github.com/vilaca/portal/internal/core"
)

const (
	// MaxNodes bounds the size of a compiled expression.
	MaxNodes = 10_000
	// MemoryBudget is expr-lang's own allocation guard: it counts the
	// elements of the arrays, maps and ranges the VM itself allocates. The
	// meter (Limits) bounds everything else.
	MemoryBudget = 1_000_000
)

// Engine compiles expr-lang expressions.
type Engine struct {
	options []expr.Option
	limits  Limits
	// names is every top-level name a rule may read: the names declared
	// (WithNames, Declare) and cluster, whose lookup syntax this package
	// implements. Names not bound for a given object (container on a
	// ConfigMap, say) evaluate to nil.
	names   []string
	runners sync.Pool
	// regexps are the compiled patterns of `matches`, shared by every
	// engine Declare derives from this one.
	regexps *regexps
}

// runner is a VM and the meter of the evaluation it runs, pooled together.
type runner struct {
	vm    vm.VM
	meter meter
}

// Option configures an Engine.
type Option func(*Engine)

// WithLimits sets the budget of every evaluation; zero fields keep the
// defaults.
func WithLimits(l Limits) Option {
	return func(e *Engine) {
		if l.Operations > 0 {
			e.limits.Operations = l.Operations
		}
		if l.Bytes > 0 {
			e.limits.Bytes = l.Bytes
		}
	}
}

// WithNames declares the top-level names rules may read besides cluster:
// the names the rule engine's context builders and binders bind (see
// Declare).
func WithNames(names ...string) Option {
	return func(e *Engine) { e.names = append(e.names, names...) }
}

// withRegexps shares compiled patterns with another engine.
func withRegexps(rx *regexps) Option {
	return func(e *Engine) { e.regexps = rx }
}

// New returns the expr-lang engine with Portal's helper functions.
func New(options ...Option) *Engine {
	e := &Engine{
		limits:  DefaultLimits(),
		runners: sync.Pool{New: func() any { return &runner{vm: vm.VM{MemoryBudget: MemoryBudget}} }},
	}
	for _, o := range options {
		o(e)
	}
	if e.regexps == nil {
		e.regexps = newRegexps()
	}
	// cluster is always known: without a binder for it a lookup fails
	// when it runs, with an error that says lookups are not available.
	e.names = append(e.names, clusterName)
	slices.Sort(e.names)
	e.names = slices.Compact(e.names)
	shape := make(map[string]any, len(e.names)+1)
	for _, n := range e.names {
		shape[n] = map[string]any(nil)
	}
	shape[meterName] = (*meter)(nil)
	opts := []expr.Option{
		expr.Env(shape),
		expr.MaxNodes(MaxNodes),
		// Rules are pure: a verdict must not depend on when it was computed,
		// and no rule needs to build huge strings.
	}
	for name, c := range builtinCosts {
		if c.meter == meterDisabled {
			opts = append(opts, expr.DisableBuiltin(name))
		}
	}
	opts = append(opts, functions()...)
	// The lookup patch runs first: fetchPatch would turn
	// cluster.<resource> into a field read.
	opts = append(opts, lookupOption(), expr.Patch(lookupPatch{}))
	opts = append(opts, fetchOption(), expr.Patch(fetchPatch{}))
	opts = append(opts, budgetOptions(e.regexps)...)
	e.options = opts
	return e
}

// Declare returns an engine with e's limits that knows exactly names (and
// cluster) as top-level names. The rule engine calls it with the names its
// context builders and binders bind, so a new binder is declared in one
// place: its Name.
func (e *Engine) Declare(names []string) core.ExpressionEngine {
	return New(WithLimits(e.limits), WithNames(names...), withRegexps(e.regexps))
}

// Names lists the top-level names the engine knows, sorted.
func (e *Engine) Names() []string { return slices.Clone(e.names) }

// Limits returns the budget of every evaluation.
func (e *Engine) Limits() Limits { return e.limits }

// Name implements core.ExpressionEngine.
func (e *Engine) Name() string { return "expr" }

// Compile implements core.ExpressionEngine.
func (e *Engine) Compile(expression string) (core.Program, error) {
	if expression == "" {
		return nil, errors.New("expression is empty")
	}
	// One parse for the checks that read the expression as written; the
	// compiler parses again, as its patches rewrite the tree. A parse error
	// is the compiler's to report, with its position.
	tree, err := parser.Parse(expression)
	var reads []core.Lookup
	if err != nil {
		tree = nil
	} else {
		if reads, err = lookups(tree); err != nil {
			return nil, err
		}
		if err := checkPatterns(tree); err != nil {
			return nil, compileError(err)
		}
	}
	// The patch is per compilation: it records what it cannot meter.
	budget := &budgetPatch{regexps: e.regexps}
	c, err := compile(expression, append(slices.Clip(e.options), expr.Patch(budget)))
	if budget.err != nil {
		// A partly patched tree may fail to compile for another reason.
		err = budget.err
	}
	if err != nil {
		return nil, compileError(operatorHint(expression, err))
	}
	p := c.prog
	prog := &program{engine: e, prog: p, ids: identifiers(p.Node(), e.names), members: members(tree, e.names), lookups: reads, base: c.base, baseBytes: c.baseBytes, metered: readsMeter(p.Node())}
	prog.result = c.result
	prog.whole = wholeMember(tree, e.names)
	return prog, nil
}

// operatorHint says what to write when an operator that reads like a
// function (contains, matches, startsWith, endsWith, in) is called as one:
// expr-lang only says it did not expect the operator.
func operatorHint(expression string, err error) error {
	fe, ok := errors.AsType[*file.Error](err)
	if !ok {
		return err
	}
	op, ok := strings.CutPrefix(fe.Message, `unexpected token Operator("`)
	if !ok {
		return err
	}
	op, _, _ = strings.Cut(op, `")`)
	switch op {
	case "contains", "matches", "startsWith", "endsWith", "in":
	default:
		return err
	}
	if rest := expression[min(max(fe.From, 0), len(expression)):]; !strings.HasPrefix(strings.TrimLeft(strings.TrimPrefix(rest, op), " "), "(") {
		return err
	}
	return fmt.Errorf("%s is an operator, not a function: write `a %s b`: %w", op, op, err)
}

// compileError places err at its offset in the expression, when it has one.
func compileError(err error) error {
	ce := &core.CompileError{Offset: -1, Err: err}
	if fe, ok := errors.AsType[*file.Error](err); ok {
		ce.Offset = fe.From
	} else if pe, ok := errors.AsType[*positioned](err); ok {
		ce.Offset = pe.offset
	}
	return ce
}

// readsMeter reports whether the budget patch put a metering helper in the
// expression. One without runs each node at most once: its cost is its size,
// bounded by MaxNodes, and it needs no meter.
func readsMeter(root ast.Node) bool {
	v := &meterVisitor{}
	ast.Walk(&root, v)
	return v.found
}

type meterVisitor struct{ found bool }

func (v *meterVisitor) Visit(node *ast.Node) {
	if id, ok := (*node).(*ast.IdentifierNode); ok && id.Value == meterName {
		v.found = true
	}
}

type program struct {
	engine *Engine
	prog   *vm.Program
	ids    []string
	// members are the field chains it reads, for the engine's schema check.
	members []core.Member
	// lookups are the cluster.* reads it makes.
	lookups []core.Lookup
	// base is what running every node once costs, and baseBytes what its
	// ranges with literal bounds build.
	base, baseBytes int64
	// metered is false for expressions without loops or costly operators.
	metered bool
	// result is the expression's type when known and not boolean; whole
	// the field chain that is the whole expression, if one is.
	result string
	whole  []string
}

// Eval implements core.Program. It binds the evaluation's meter in env for
// the duration of the call, so env must not be shared with a concurrent Eval.
func (p *program) Eval(ctx context.Context, env core.Env) (any, error) {
	var acct core.Account
	return p.EvalShared(ctx, env, &acct)
}

// EvalShared implements core.Program: the meter starts from what acct has
// spent and leaves its own total there.
func (p *program) EvalShared(ctx context.Context, env core.Env, acct *core.Account) (out any, err error) {
	if err := ctx.Err(); err != nil {
		return nil, &core.BudgetError{Kind: core.BudgetDeadline, Err: context.Cause(ctx)}
	}
	r := p.engine.runners.Get().(*runner)
	r.meter.reset(ctx, p.engine.limits, acct)
	// Every node once, loops over array literals included, costs base
	// whatever the input; an account already spent stops here too.
	err = r.meter.charge(p.base, p.baseBytes)
	if err == nil {
		if p.metered {
			env[meterName] = &r.meter
		}
		out, err = r.run(p.prog, env)
		if p.metered {
			delete(env, meterName)
		}
		if err == nil {
			err = checkResult(&r.meter, out)
		}
	}
	r.meter.settle(acct)
	r.meter.ctx, r.meter.done = nil, nil
	p.engine.runners.Put(r)
	if err != nil {
		return nil, budgetError(err, p.engine.limits)
	}
	return out, nil
}

// run runs prog on the runner's VM. The VM recovers panics from the program
// itself; this guards the helpers and anything else that could still unwind.
func (r *runner) run(prog *vm.Program, env core.Env) (out any, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			out, err = nil, fmt.Errorf("evaluation panicked: %v", rec)
		}
	}()
	return r.vm.Run(prog, env)
}

// checkResult measures a composite result as the caller will walk it when it
// prints (messages) or encodes it.
func checkResult(m *meter, out any) error {
	switch out.(type) {
	case nil, bool, string, int, float64:
		return nil
	}
	return m.expand(out)
}

// budgetError gives expr-lang's own allocation guard the same error as the
// meter's byte budget.
func budgetError(err error, l Limits) error {
	if !errors.Is(err, core.ErrBudgetExceeded) && strings.Contains(err.Error(), "memory budget exceeded") {
		return fmt.Errorf("%w: %w", &core.BudgetError{Kind: core.BudgetBytes, Limit: l.Bytes}, err)
	}
	return err
}

func (p *program) Identifiers() []string { return p.ids }

// Lookups lists the cluster.* reads the expression makes.
func (p *program) Lookups() []core.Lookup { return p.lookups }

// identifiers lists the environment names an expression reads.
func identifiers(root ast.Node, names []string) []string {
	v := &idVisitor{names: names}
	ast.Walk(&root, v)
	slices.Sort(v.ids)
	return slices.Compact(v.ids)
}

type idVisitor struct{ ids, names []string }

func (v *idVisitor) Visit(node *ast.Node) {
	if id, ok := (*node).(*ast.IdentifierNode); ok && slices.Contains(v.names, id.Value) {
		v.ids = append(v.ids, id.Value)
	}
}
