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
	"github.com/expr-lang/expr/vm"

	"github.com/vilaca/portal/internal/core"
)

// names is every top-level name a rule may read. Names not bound for a given
// object (container on a ConfigMap, say) evaluate to nil.
var names = []string{"object", "metadata", "request", "container", "spec", "securityContext", "pod"}

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
	runners sync.Pool
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

// New returns the expr-lang engine with Portal's helper functions.
func New(options ...Option) *Engine {
	shape := make(map[string]any, len(names)+1)
	for _, n := range names {
		shape[n] = map[string]any(nil)
	}
	shape[meterName] = (*meter)(nil)
	opts := []expr.Option{
		expr.Env(shape),
		expr.MaxNodes(MaxNodes),
		// Rules are pure: a verdict must not depend on when it was computed,
		// and no rule needs to build huge strings.
		expr.DisableBuiltin("now"),
		expr.DisableBuiltin("repeat"),
	}
	opts = append(opts, functions()...)
	opts = append(opts, fetchOption(), expr.Patch(fetchPatch{}))
	opts = append(opts, budgetOptions()...)
	opts = append(opts, expr.Patch(budgetPatch{}))
	e := &Engine{
		options: opts,
		limits:  DefaultLimits(),
		runners: sync.Pool{New: func() any { return &runner{vm: vm.VM{MemoryBudget: MemoryBudget}} }},
	}
	for _, o := range options {
		o(e)
	}
	return e
}

// Limits returns the budget of every evaluation.
func (e *Engine) Limits() Limits { return e.limits }

// Name implements core.ExpressionEngine.
func (e *Engine) Name() string { return "expr" }

// Compile implements core.ExpressionEngine.
func (e *Engine) Compile(expression string) (core.Program, error) {
	if expression == "" {
		return nil, errors.New("expression is empty")
	}
	p, err := expr.Compile(expression, e.options...)
	if err != nil {
		return nil, err
	}
	return &program{engine: e, prog: p, ids: identifiers(p.Node()), base: countNodes(p.Node())}, nil
}

type program struct {
	engine *Engine
	prog   *vm.Program
	ids    []string
	// base is what running every node once costs.
	base int64
}

// Eval implements core.Program. It binds the evaluation's meter in env for
// the duration of the call, so env must not be shared with a concurrent Eval.
func (p *program) Eval(ctx context.Context, env core.Env) (out any, err error) {
	if err := ctx.Err(); err != nil {
		return nil, &core.BudgetError{Kind: core.BudgetDeadline, Err: context.Cause(ctx)}
	}
	r := p.engine.runners.Get().(*runner)
	defer p.engine.runners.Put(r)
	r.meter.reset(ctx, p.engine.limits, p.base)
	defer func() { r.meter.ctx, r.meter.done = nil, nil }()
	env[meterName] = &r.meter
	defer delete(env, meterName)
	// The VM recovers panics from the program itself; this guards the
	// helpers and anything else that could still unwind.
	defer func() {
		if rec := recover(); rec != nil {
			out, err = nil, fmt.Errorf("evaluation panicked: %v", rec)
		}
	}()
	out, err = r.vm.Run(p.prog, env)
	if err != nil {
		return nil, budgetError(err, p.engine.limits)
	}
	// A composite result is printed (messages) or encoded by the caller:
	// measure it as they will walk it.
	switch out.(type) {
	case nil, bool, string, int, float64:
	default:
		if err := r.meter.expand(out); err != nil {
			return nil, err
		}
	}
	return out, nil
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

// identifiers lists the environment names an expression reads.
func identifiers(root ast.Node) []string {
	v := &idVisitor{}
	ast.Walk(&root, v)
	slices.Sort(v.ids)
	return slices.Compact(v.ids)
}

type idVisitor struct{ ids []string }

func (v *idVisitor) Visit(node *ast.Node) {
	if id, ok := (*node).(*ast.IdentifierNode); ok && slices.Contains(names, id.Value) {
		v.ids = append(v.ids, id.Value)
	}
}
