package exprlang

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
)

// Names of the metering helpers the budget patch inserts. Like fetchName they
// cannot be written in an expression.
const (
	meterName   = "$portal.meter"
	loopName    = "$portal.loop"
	scanName    = "$portal.scan"
	scanInName  = "$portal.scanIn"
	expandName  = "$portal.expand"
	builtName   = "$portal.built"
	joinName    = "$portal.join"
	replaceName = "$portal.replace"
	globName    = "$portal.glob"
	inflateName = "$portal.inflate"
)

// Bytes charged per byte of input where a small input builds a large value:
// a compiled regexp, a decoded JSON document ("[[],[]]" is mostly slice
// headers).
const (
	regexpInflation = 64
	jsonInflation   = 16
)

// budgetPatch makes every evaluation pay for its work out of the meter bound
// as meterName in the environment:
//
//   - a predicate (all, any, map, reduce, ...) pays, before it starts, the
//     size of its body for every element it may visit, so nested loops are
//     charged their product before they run;
//   - an operator or builtin whose cost grows with its input (==, in,
//     contains, matches, toJSON, sort, max, ...) pays for the input first;
//   - whatever builds a string, array or map (+, join, replace, map,
//     filter, concat, split, toJSON, string, ...) pays for what it built,
//     and where the result can be far larger than the input (join, replace,
//     toJSON, string, flatten) for the expected result before building it.
//
// Nodes outside predicates run at most once per evaluation; the engine
// charges the expression's size once when the evaluation starts.
type budgetPatch struct{}

func (budgetPatch) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.BuiltinNode:
		patchBuiltin(node, n)
	case *ast.BinaryNode:
		patchBinary(node, n)
	case *ast.CallNode:
		if id, ok := n.Callee.(*ast.IdentifierNode); ok {
			switch id.Value {
			case "quantity", "parseImage", "selects":
				wrapArgs(n.Arguments, scanName)
			case "glob":
				if len(n.Arguments) == 2 {
					n.Arguments = []ast.Node{n.Arguments[0], helper(globName, n.Arguments[0], n.Arguments[1])}
				}
			}
		}
	}
}

// predicates are the builtins that run a closure per element.
var predicates = map[string]bool{
	"all": true, "none": true, "any": true, "one": true, "filter": true, "map": true,
	"find": true, "findIndex": true, "findLast": true, "findLastIndex": true,
	"count": true, "sum": true, "groupBy": true, "sortBy": true, "reduce": true,
}

// constant-time builtins: their cost does not depend on their input.
var constantTime = map[string]bool{
	"len": true, "type": true, "abs": true, "ceil": true, "floor": true, "round": true,
	"int": true, "float": true, "first": true, "last": true, "get": true, "bitnot": true,
	"bitand": true, "bitor": true, "bitxor": true, "bitnand": true, "bitshl": true,
	"bitshr": true, "bitushr": true, "now": true, "timezone": true,
}

// expanding builtins can build far more than they read.
var expanding = map[string]bool{"string": true, "toJSON": true, "flatten": true}

func patchBuiltin(node *ast.Node, n *ast.BuiltinNode) {
	if predicates[n.Name] && len(n.Arguments) >= 2 {
		if body, ok := n.Arguments[1].(*ast.PredicateNode); ok {
			// Over an array literal the number of iterations is known
			// when the rule compiles: staticCost charges it up front.
			if _, static := n.Arguments[0].(*ast.ArrayNode); !static {
				n.Arguments[0] = helper(loopName, &ast.IntegerNode{Value: int(staticCost(body)) + 1}, n.Arguments[0])
			}
			// reduce's initial value and any other argument run once.
			switch n.Name {
			case "filter", "map", "groupBy", "sortBy":
				wrapNode(node, builtName)
			}
			return
		}
	}
	switch {
	case constantTime[n.Name]:
		return
	case expanding[n.Name]:
		wrapArgs(n.Arguments, expandName)
	case n.Name == "join" && len(n.Arguments) >= 1:
		sep := ast.Node(&ast.StringNode{Value: ""})
		if len(n.Arguments) > 1 {
			sep = n.Arguments[1]
		}
		n.Arguments[0] = helper(joinName, n.Arguments[0], sep)
	case n.Name == "fromJSON" && len(n.Arguments) == 1:
		n.Arguments[0] = helper(inflateName, &ast.IntegerNode{Value: jsonInflation}, n.Arguments[0])
	case n.Name == "replace" && len(n.Arguments) == 3:
		n.Arguments[0] = helper(replaceName, n.Arguments[0], n.Arguments[1], n.Arguments[2])
	case linear[n.Name]:
		// Cost and result both grow with the input: charging the result
		// is enough.
	default:
		wrapArgs(n.Arguments, scanName)
	}
	wrapNode(node, builtName)
}

// linear builtins read no more than the result they build (split does not:
// it scans the whole string for a few pieces).
var linear = map[string]bool{
	"keys": true, "values": true, "toPairs": true, "fromPairs": true, "concat": true,
	"reverse": true, "take": true, "upper": true, "lower": true, "trim": true,
	"trimPrefix": true, "trimSuffix": true, "toBase64": true, "fromBase64": true,
}

func patchBinary(node *ast.Node, n *ast.BinaryNode) {
	switch n.Operator {
	case "+":
		// A number on either side makes a number (or an error).
		if !isNumber(n.Left.Type()) && !isNumber(n.Right.Type()) && !isNumberLiteral(n.Left) && !isNumberLiteral(n.Right) {
			wrapNode(node, builtName)
		}
	case "..":
		// Literal bounds: its size is known when the rule compiles.
		if !isLiteral(n.Left) || !isLiteral(n.Right) {
			wrapNode(node, builtName)
		}
	case "==", "!=", "<", ">", "<=", ">=":
		// The comparison stops within the smaller operand; a literal one
		// makes it cheap.
		if !isLiteral(n.Left) && !isLiteral(n.Right) {
			n.Left = helper(scanName, n.Left)
		}
	case "in", "not in":
		if !isLiteral(n.Right) {
			n.Right = helper(scanInName, n.Right)
		}
	case "contains", "matches":
		if !isLiteral(n.Left) {
			n.Left = helper(scanName, n.Left)
		}
		switch {
		case isLiteral(n.Right):
		case n.Operator == "matches":
			// A pattern that is not a literal is compiled on every run.
			n.Right = helper(inflateName, &ast.IntegerNode{Value: regexpInflation}, n.Right)
		default:
			n.Right = helper(scanName, n.Right)
		}
	case "startsWith", "endsWith":
		if !isLiteral(n.Right) {
			n.Right = helper(scanName, n.Right)
		}
	}
}

// helper is a call of the metering function name with the meter first.
func helper(name string, args ...ast.Node) ast.Node {
	call := &ast.CallNode{
		Callee:    &ast.IdentifierNode{Value: name},
		Arguments: append([]ast.Node{&ast.IdentifierNode{Value: meterName}}, args...),
	}
	if len(args) > 0 {
		call.SetLocation(args[len(args)-1].Location())
	}
	return call
}

func wrapNode(node *ast.Node, name string) {
	call := helper(name, *node)
	call.SetLocation((*node).Location())
	ast.Patch(node, call)
}

func wrapArgs(args []ast.Node, name string) {
	for i, a := range args {
		if !isLiteral(a) {
			args[i] = helper(name, a)
		}
	}
}

// isLiteral reports whether n is a constant whose cost is its own size,
// known when the rule compiles.
func isLiteral(n ast.Node) bool {
	switch x := n.(type) {
	case *ast.NilNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.StringNode, *ast.ConstantNode:
		return true
	case *ast.UnaryNode:
		return isLiteral(x.Node)
	case *ast.ArrayNode:
		for _, e := range x.Nodes {
			if !isLiteral(e) {
				return false
			}
		}
		return true
	}
	return false
}

func isNumber(t reflect.Type) bool {
	if t == nil {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

func isNumberLiteral(n ast.Node) bool {
	switch x := n.(type) {
	case *ast.IntegerNode, *ast.FloatNode:
		return true
	case *ast.UnaryNode:
		return isNumberLiteral(x.Node)
	}
	return false
}

// staticCost is what one run of n costs, known when the rule compiles: one
// per node, and a predicate over an array literal its body once per
// element. Predicates over anything else pay for themselves when they run.
func staticCost(n ast.Node) int64 {
	if n == nil {
		return 0
	}
	if b, ok := n.(*ast.BuiltinNode); ok && predicates[b.Name] && len(b.Arguments) >= 2 {
		if n, ok := literalLen(b.Arguments[0]); ok {
			var c int64 = 1
			for i, a := range b.Arguments {
				if i != 1 {
					c = satAdd(c, staticCost(a))
				}
			}
			return satAdd(c, satMul(n, staticCost(b.Arguments[1])))
		}
	}
	var c int64 = 1
	for _, ch := range children(n) {
		c = satAdd(c, staticCost(ch))
	}
	return c
}

// literalLen is the length of an array written in the expression (the
// optimizer turns constant ones into a ConstantNode).
func literalLen(n ast.Node) (int64, bool) {
	switch x := n.(type) {
	case *ast.ArrayNode:
		return int64(len(x.Nodes)), true
	case *ast.ConstantNode:
		if v := reflect.ValueOf(x.Value); v.Kind() == reflect.Slice || v.Kind() == reflect.Array {
			return int64(v.Len()), true
		}
	}
	return 0, false
}

// children are the nodes ast.Walk visits under n.
func children(n ast.Node) []ast.Node {
	switch x := n.(type) {
	case *ast.UnaryNode:
		return []ast.Node{x.Node}
	case *ast.BinaryNode:
		return []ast.Node{x.Left, x.Right}
	case *ast.ChainNode:
		return []ast.Node{x.Node}
	case *ast.MemberNode:
		return []ast.Node{x.Node, x.Property}
	case *ast.SliceNode:
		return []ast.Node{x.Node, x.From, x.To}
	case *ast.CallNode:
		return append([]ast.Node{x.Callee}, x.Arguments...)
	case *ast.BuiltinNode:
		return x.Arguments
	case *ast.PredicateNode:
		return []ast.Node{x.Node}
	case *ast.VariableDeclaratorNode:
		return []ast.Node{x.Value, x.Expr}
	case *ast.SequenceNode:
		return x.Nodes
	case *ast.ConditionalNode:
		return []ast.Node{x.Cond, x.Exp1, x.Exp2}
	case *ast.ArrayNode:
		return x.Nodes
	case *ast.MapNode:
		return x.Pairs
	case *ast.PairNode:
		return []ast.Node{x.Key, x.Value}
	}
	return nil
}

// budgetOptions registers the metering helpers. Each returns its last
// argument unchanged once the meter has accepted the charge.
func budgetOptions() []expr.Option {
	return []expr.Option{
		expr.Function(loopName, func(p ...any) (any, error) {
			return p[2], p[0].(*meter).charge(satMul(length(p[2]), int64(p[1].(int))), 0)
		}),
		expr.Function(scanName, func(p ...any) (any, error) {
			return p[1], p[0].(*meter).scan(p[1])
		}),
		expr.Function(scanInName, func(p ...any) (any, error) {
			m := p[0].(*meter)
			if reflect.ValueOf(p[1]).Kind() == reflect.Map {
				return p[1], m.charge(1, 0)
			}
			return p[1], m.scan(p[1])
		}),
		expr.Function(expandName, func(p ...any) (any, error) {
			return p[1], p[0].(*meter).expand(p[1])
		}),
		expr.Function(builtName, func(p ...any) (any, error) {
			return p[1], p[0].(*meter).built(p[1])
		}),
		expr.Function(inflateName, func(p ...any) (any, error) {
			n := length(p[2])
			return p[2], p[0].(*meter).charge(n/bytesPerOp+1, satMul(n, int64(p[1].(int))))
		}),
		expr.Function(joinName, meteredJoin),
		expr.Function(replaceName, meteredReplace),
		expr.Function(globName, meteredGlob),
	}
}

// meteredJoin charges join(p[1], p[2]) its result before it is built.
func meteredJoin(p ...any) (any, error) {
	m := p[0].(*meter)
	if err := m.scan(p[1]); err != nil {
		return nil, err
	}
	sep, _ := p[2].(string)
	n := length(p[1])
	_, b, _ := deep(p[1], m.left())
	size := satAdd(b, satMul(max(n-1, 0), int64(len(sep))))
	return p[1], m.charge(size/bytesPerOp, size)
}

// meteredReplace charges replace(p[1], p[2], p[3]) its result before it is
// built: with an empty old string the new one is inserted between every
// character.
func meteredReplace(p ...any) (any, error) {
	m := p[0].(*meter)
	s, ok1 := p[1].(string)
	old, ok2 := p[2].(string)
	repl, ok3 := p[3].(string)
	if !ok1 || !ok2 || !ok3 {
		return p[1], m.charge(1, 0)
	}
	if err := m.charge(int64(len(s))/bytesPerOp+1, 0); err != nil {
		return nil, err
	}
	var n int64
	if old == "" {
		n = int64(len(s)) + 1
	} else {
		n = int64(strings.Count(s, old))
	}
	size := satAdd(int64(len(s)), satMul(n, int64(max(len(repl)-len(old), 0))))
	return p[1], m.charge(size/bytesPerOp, size)
}

// meteredGlob charges glob(pattern, name): matching can try the pattern at
// every position of the name.
func meteredGlob(p ...any) (any, error) {
	m := p[0].(*meter)
	pattern, _ := p[1].(string)
	name, _ := p[2].(string)
	if len(pattern) > maxGlobPattern {
		return nil, fmt.Errorf("glob: pattern is %d bytes, longer than %d", len(pattern), maxGlobPattern)
	}
	cost := satMul(int64(len(pattern)+1), int64(len(name)+1)) / bytesPerOp
	return p[2], m.charge(cost+1, 0)
}

// maxGlobPattern bounds a glob pattern; no name pattern needs more.
const maxGlobPattern = 1024
