// Package exprlang is Portal's default ExpressionEngine, built on
// github.com/expr-lang/expr. Each expression is compiled once; evaluation runs
// the cached bytecode on a pooled VM with a memory budget, which bounds the
// work any expression can do.
package exprlang

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/vilaca/portal/internal/core"
)

// names is every top-level name a rule may read. Names not bound for a given
// object (container on a ConfigMap, say) evaluate to nil.
var names = []string{"object", "metadata", "request", "container", "spec", "securityContext", "pod"}

const (
	// MaxNodes bounds the size of a compiled expression.
	MaxNodes = 10_000
	// MemoryBudget bounds the work of one evaluation. expr-lang charges every
	// allocation and every element a predicate (all, any, filter, ...) visits,
	// so nested loops over large inputs end in an error instead of a hang.
	MemoryBudget = 1_000_000
)

// Engine compiles expr-lang expressions.
type Engine struct {
	options []expr.Option
	vms     sync.Pool
}

// New returns the expr-lang engine with Portal's helper functions.
func New() *Engine {
	shape := make(map[string]any, len(names))
	for _, n := range names {
		shape[n] = map[string]any(nil)
	}
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
	return &Engine{
		options: opts,
		vms:     sync.Pool{New: func() any { return &vm.VM{MemoryBudget: MemoryBudget} }},
	}
}

// Name implements core.ExpressionEngine.
func (e *Engine) Name() string { return "expr" }

// Compile implements core.ExpressionEngine.
func (e *Engine) Compile(expression string) (core.Program, error) {
	if expression == "" {
		return nil, errors.New("expression is empty")
	}
	p, err := expr.Compile(expression, e.options...)
	if err != nil {
		ce := &core.CompileError{Offset: -1, Err: err}
		if fe, ok := errors.AsType[*file.Error](err); ok {
			ce.Offset = fe.From
		}
		return nil, ce
	}
	return &program{engine: e, prog: p, ids: identifiers(p.Node()), members: members(expression)}, nil
}

type program struct {
	engine  *Engine
	prog    *vm.Program
	ids     []string
	members []core.Member
}

func (p *program) Eval(env core.Env) (out any, err error) {
	m := p.engine.vms.Get().(*vm.VM)
	defer p.engine.vms.Put(m)
	// The VM recovers panics from the program itself; this guards the
	// helpers and anything else that could still unwind.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("evaluation panicked: %v", r)
		}
	}()
	return m.Run(p.prog, env)
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
