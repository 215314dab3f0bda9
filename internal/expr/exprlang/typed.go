package exprlang

import (
	"errors"
	"math/bits"
	"reflect"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/checker"
	"github.com/expr-lang/expr/compiler"
	"github.com/expr-lang/expr/conf"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/optimizer"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/vm"
)

// typedFunc is how the VM calls Portal's hot helpers (fetch and most of
// the metering ones): a call of a value of this type is one of expr-lang's
// typed calls, which pops its two arguments off the stack. A function
// registered with expr.Function instead gets its arguments in a []any that
// the VM sizes by scanning the whole program and allocates on every
// evaluation, and again on every call past that first estimate: a quarter
// of the CPU of the pod-security bundle on a pod went there. typedCalls
// puts a typedFunc in the checked and optimized tree as the constant callee
// of the call, which no expression can write. A typedFunc fails by
// panicking with its error; the VM turns the panic into the evaluation's
// error, as it does the error a registered function returns.
type typedFunc = func(any, any) any

// meterFunc is a metering helper of one operand: it charges the meter for
// the operand, which the call then evaluates to.
type meterFunc func(m *meter, v any) error

// unaryHelpers are the metering helpers called with the meter and the value
// they charge for.
var unaryHelpers = map[string]meterFunc{
	loopStartName: func(m *meter, _ any) error { return m.charge(1, loopStartBytes) },
	strName: func(m *meter, v any) error {
		if s, ok := v.(string); ok {
			return m.charge(int64(len(s))/bytesPerOp+1, 0)
		}
		return m.charge(1, 0)
	},
	scanName: (*meter).scan,
	scanInName: func(m *meter, v any) error {
		if reflect.ValueOf(v).Kind() == reflect.Map {
			return m.charge(1, 0)
		}
		return m.scan(v)
	},
	sortName: func(m *meter, v any) error {
		return m.scanTimes(v, int64(bits.Len64(uint64(length(v))))+1)
	},
	pairsName:  func(m *meter, v any) error { return m.scanTimes(v, length(v)) },
	expandName: (*meter).expand,
	builtName:  (*meter).built,
	jsonName:   (*meter).indentedJSON,
	elemsName: func(m *meter, v any) error {
		n := length(v)
		return m.charge(n+1, satMul(n, elemBytes))
	},
}

// countedHelpers are the metering helpers called with the meter, a count
// the patch wrote as an integer literal, and the value: the count is bound
// into the typed form when the rule compiles.
var countedHelpers = map[string]func(n int64) meterFunc{
	iterName:   chargeOps,
	chargeName: chargeOps,
	hashKeyName: func(n int64) meterFunc {
		return func(m *meter, v any) error {
			if err := m.charge(n, 0); err != nil {
				return err
			}
			return m.scan(v)
		}
	},
	sortKeyName: func(n int64) meterFunc {
		return func(m *meter, v any) error {
			if err := m.charge(n, 0); err != nil {
				return err
			}
			return m.scanTimes(v, sortLevels)
		}
	},
	inflateName: func(factor int64) meterFunc {
		return func(m *meter, v any) error {
			n := length(v)
			return m.charge(n/bytesPerOp+1, satMul(n, factor))
		}
	},
}

func chargeOps(n int64) meterFunc {
	return func(m *meter, _ any) error { return m.charge(n, 0) }
}

// typedHelper is the typed form of a call of the helper name on args (the
// meter left out) and the operand it is then called with after the meter;
// ok is false for the helpers that keep their registered form, those of
// more operands (join, replace, trim, split, glob, match on a pattern
// computed when the rule runs).
func typedHelper(name string, args []ast.Node) (fn typedFunc, operand ast.Node, ok bool) {
	switch len(args) {
	case 1:
		if f, ok := unaryHelpers[name]; ok {
			return passThrough(f), args[0], true
		}
	case 2:
		if mk, ok := countedHelpers[name]; ok {
			if n, ok := args[0].(*ast.IntegerNode); ok {
				return passThrough(mk(int64(n.Value))), args[1], true
			}
		}
		if c, ok := args[1].(*ast.ConstantNode); ok && name == matchLitName {
			if re, ok := c.Value.(*compiledRegexp); ok {
				return func(m, s any) any { return must(match(m.(*meter), s, re)) }, args[0], true
			}
		}
	}
	return nil, nil, false
}

// passThrough is f as a typed helper: the call evaluates to its operand
// once the meter has accepted the charge.
func passThrough(f meterFunc) typedFunc {
	return func(m, v any) any {
		if err := f(m.(*meter), v); err != nil {
			panic(err)
		}
		return v
	}
}

// must is a typed helper's result: its error is the evaluation's (see
// typedFunc).
func must(v any, err error) any {
	if err != nil {
		panic(err)
	}
	return v
}

// typedFetch is fetch as the VM calls it fastest.
func typedFetch(from, key any) any { return must(fetch(from, key)) }

// typedCalls turns the calls of fetch and of the helpers typedHelper knows
// into typed calls. It runs on the checked and optimized tree: the
// optimizer prints nodes (ast.ConstantNode.String JSON-encodes its value,
// and panics on a function), and the checker types the calls by the
// registered forms.
type typedCalls struct{}

func (typedCalls) Visit(node *ast.Node) {
	call, ok := (*node).(*ast.CallNode)
	if !ok {
		return
	}
	id, ok := call.Callee.(*ast.IdentifierNode)
	if !ok || len(call.Arguments) == 0 {
		return
	}
	var fn typedFunc
	args := call.Arguments
	if id.Value == fetchName && len(args) == 2 {
		fn = typedFetch
	} else if f, operand, ok := typedHelper(id.Value, args[1:]); ok {
		fn, args = f, []ast.Node{args[0], operand}
	} else {
		return
	}
	callee := &ast.ConstantNode{Value: fn}
	callee.SetType(reflect.TypeOf(fn))
	callee.SetLocation(id.Location())
	call.Callee, call.Arguments = callee, args
}

// compiled is a compiled expression and what running each of its nodes
// once costs (staticCost, staticBytes), counted on the tree as the patches
// left it: typedCalls drops arguments (a helper's count, a literal
// pattern), which the cost model still counts.
type compiled struct {
	prog            *vm.Program
	base, baseBytes int64
	// result is typeWords of the expression as written: its type before
	// the patches, or "" where the checker does not know it.
	result string
}

// compile is expr.Compile (expr-lang v1.17) with typedCalls between
// optimizing the tree and compiling it, which expr-lang has no hook for.
// TestCompileAsExprLang holds it to expr.Compile's results.
func compile(input string, opts []expr.Option) (compiled, error) {
	config := conf.CreateNew()
	for _, op := range opts {
		op(config)
	}
	for name := range config.Disabled {
		delete(config.Builtins, name)
	}
	config.Check()
	// checker.ParseCheck, with the type of the tree as written taken
	// before the patches wrap its reads in calls of unknown type.
	tree, err := parser.ParseWithConfig(input, config)
	if err != nil {
		return compiled{}, err
	}
	result := ""
	if t, err := checker.Check(tree, config); err == nil && t != nil {
		result = typeWords(t)
	}
	if _, err := new(checker.Checker).PatchAndCheck(tree, config); err != nil {
		return compiled{}, err
	}
	if config.Optimize {
		if err := optimizer.Optimize(&tree.Node, config); err != nil {
			if fe, ok := errors.AsType[*file.Error](err); ok {
				return compiled{}, fe.Bind(tree.Source)
			}
			return compiled{}, err
		}
	}
	c := compiled{base: staticCost(tree.Node), baseBytes: staticBytes(tree.Node), result: result}
	ast.Walk(&tree.Node, typedCalls{})
	c.prog, err = compiler.Compile(tree, config)
	return c, err
}
