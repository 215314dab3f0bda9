package exprlang

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"

	"github.com/vilaca/portal/internal/didyoumean"
)

// Names of the metering helpers the budget patch inserts. Like fetchName they
// cannot be written in an expression.
const (
	meterName     = "$portal.meter"
	iterName      = "$portal.iter"
	loopStartName = "$portal.loopStart"
	hashKeyName   = "$portal.hashKey"
	sortKeyName   = "$portal.sortKey"
	chargeName    = "$portal.charge"
	strName       = "$portal.str"
	scanName      = "$portal.scan"
	scanInName    = "$portal.scanIn"
	sortName      = "$portal.sort"
	pairsName     = "$portal.pairs"
	expandName    = "$portal.expand"
	builtName     = "$portal.built"
	joinName      = "$portal.join"
	replaceName   = "$portal.replace"
	trimName      = "$portal.trim"
	splitName     = "$portal.split"
	jsonName      = "$portal.json"
	elemsName     = "$portal.elems"
	globName      = "$portal.glob"
	inflateName   = "$portal.inflate"
	matchName     = "$portal.match"
	matchLitName  = "$portal.matchLit"
)

// Bytes charged per byte of input where a small input builds a large value:
// a decoded JSON document ("[[],[]]" is mostly slice headers).
const jsonInflation = 16

// Fixed charges of work whose cost does not show in its input's size.
const (
	// loopStartBytes is what entering a loop is charged: half of what the
	// VM allocates for it, so nested loops count against the byte budget.
	loopStartBytes = 512
	// zoneCost is date()'s reading of a time zone file.
	zoneCost = 1000
	// sortLevels bounds log2 of the number of keys sortBy compares: expr-lang
	// allocates at most MemoryBudget elements.
	sortLevels = 20
)

// budgetPatch makes every evaluation pay for its work out of the meter bound
// as meterName in the environment, as the cost model (costs.go) says:
//
//   - a predicate (all, any, map, reduce, ...) pays its body's size on every
//     iteration, as the iteration ends, so a loop is stopped mid-way by the
//     budget or the deadline;
//   - an operator or builtin whose cost grows with its input (==, in,
//     contains, matches, len, toJSON, sort, max, ...) pays for the input
//     first;
//   - whatever builds a string, array or map (+, join, replace, map,
//     filter, concat, split, toJSON, string, ...) pays for what it built,
//     and where the result can be far larger than the input (join, replace,
//     toJSON, string, flatten) for the expected result before building it.
//
// Nodes outside predicates run at most once per evaluation; the engine
// charges the expression's size once when the evaluation starts. A builtin,
// operator or function without a row in the cost model is a compile error.
type budgetPatch struct {
	regexps *regexps
	err     error
}

func (p *budgetPatch) Visit(node *ast.Node) {
	if p.err != nil {
		return
	}
	switch n := (*node).(type) {
	case *ast.BuiltinNode:
		c, ok := builtinCosts[n.Name]
		if !ok || c.meter == meterDisabled {
			p.fail(n, "%s is not available in rules: Portal's evaluation budget has no cost for it", n.Name)
			return
		}
		patchBuiltin(node, n, c.meter)
	case *ast.BinaryNode:
		if _, ok := operatorCosts[n.Operator]; !ok {
			p.fail(n, "operator %s is not available in rules: Portal's evaluation budget has no cost for it", n.Operator)
			return
		}
		p.patchBinary(node, n)
	case *ast.UnaryNode:
		if _, ok := operatorCosts[n.Operator]; !ok {
			p.fail(n, "operator %s is not available in rules: Portal's evaluation budget has no cost for it", n.Operator)
		}
	case *ast.CallNode:
		p.patchCall(node, n)
	case *ast.MemberNode:
		// a[k] hashes k: a megabyte key in a loop cost a second of CPU
		// at one operation a lookup.
		if !isLiteral(n.Property) {
			n.Property = helper(strName, n.Property)
		}
	}
}

// fail records the first node the patch cannot meter; Compile returns it.
func (p *budgetPatch) fail(n ast.Node, format string, args ...any) {
	p.err = &positioned{offset: n.Location().From, err: fmt.Errorf(format, args...)}
}

func (p *budgetPatch) patchCall(node *ast.Node, n *ast.CallNode) {
	switch callee := n.Callee.(type) {
	case *ast.IdentifierNode:
		if strings.HasPrefix(callee.Value, "$portal.") {
			// Portal's own helpers (fetch, lookup) meter themselves.
			return
		}
		if c, ok := builtinCosts[callee.Value]; ok && c.meter == meterDisabled {
			// Disabled builtins reach here as calls of an unknown name.
			p.fail(n, "%s is not available in rules: %s", callee.Value, strings.TrimPrefix(c.charge, "disabled: "))
			return
		}
		if _, ok := functionCosts[callee.Value]; !ok {
			// Portal's functions all have a row, and expr-lang's builtins
			// are BuiltinNodes: this name is none of them.
			p.fail(n, "unknown function %s%s: rules call expr-lang's builtins and Portal's functions (docs/reference/expression-language.md)", callee.Value, closestFunction(callee.Value))
			return
		}
		if callee.Value == "glob" {
			if len(n.Arguments) == 2 {
				n.Arguments = []ast.Node{n.Arguments[0], helper(globName, n.Arguments[0], n.Arguments[1])}
			}
			return
		}
		wrapArgs(n.Arguments, scanName)
	case *ast.MemberNode:
		// A method of a value a builtin returned (time.Time.Format, ...).
		wrapArgs(n.Arguments, strName)
		wrapNode(node, builtName)
	default:
		p.fail(n, "this call is not available in rules: Portal's evaluation budget has no cost for it")
	}
}

// closestFunction names, as a "did you mean" clause, the callable function
// or builtin nearest to a misspelt one.
func closestFunction(name string) string {
	var names []string
	for f := range functionCosts {
		if !strings.ContainsAny(f, ". ") {
			names = append(names, f)
		}
	}
	for b, c := range builtinCosts {
		if c.meter != meterDisabled {
			names = append(names, b)
		}
	}
	if s := didyoumean.Closest(name, names); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	return ""
}

func patchBuiltin(node *ast.Node, n *ast.BuiltinNode, m metering) {
	switch m {
	case meterLoop, meterKeyedLoop:
		if len(n.Arguments) >= 2 {
			// Entering a loop allocates the VM's scope for it: about a
			// kilobyte, which a loop nested in another pays on every outer
			// iteration (none(1..100000, {one([], false)}) allocated 105 MB
			// within the operation budget).
			n.Arguments[0] = helper(loopStartName, n.Arguments[0])
			if body, ok := n.Arguments[1].(*ast.PredicateNode); ok {
				c := &ast.IntegerNode{Value: int(min(staticCost(body.Node), MaxNodes)) + 1}
				switch n.Name {
				case "sortBy":
					body.Node = helper(sortKeyName, c, body.Node)
				case "groupBy":
					body.Node = helper(hashKeyName, c, body.Node)
				default:
					body.Node = helper(iterName, c, body.Node)
				}
			}
		}
		switch n.Name {
		case "filter", "map", "groupBy", "sortBy":
			wrapNode(node, builtName)
		}
		return
	case meterConstant:
		return
	case meterStrings:
		wrapArgs(n.Arguments, strName)
		if n.Name == "date" && len(n.Arguments) == 3 {
			n.Arguments[2] = helper(chargeName, &ast.IntegerNode{Value: zoneCost}, n.Arguments[2])
		}
		return
	case meterExpand:
		wrapArgs(n.Arguments, expandName)
	case meterScan:
		wrapArgs(n.Arguments, scanName)
	case meterSort:
		if len(n.Arguments) > 0 {
			n.Arguments[0] = helper(sortName, n.Arguments[0])
		}
	case meterQuadratic:
		if len(n.Arguments) > 0 {
			n.Arguments[0] = helper(pairsName, n.Arguments[0])
		}
	case meterLinear:
		// Cost and result both grow with the input: charging the result
		// is enough.
	case meterSpecial:
		if patchSpecialBuiltin(n) {
			return
		}
	}
	wrapNode(node, builtName)
}

// patchSpecialBuiltin reports whether the helper it put in charges the
// whole result before it is built.
func patchSpecialBuiltin(n *ast.BuiltinNode) (charged bool) {
	switch {
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
	case (n.Name == "split" || n.Name == "splitAfter") && len(n.Arguments) >= 2:
		n.Arguments[0] = helper(splitName, n.Arguments[0], n.Arguments[1])
		return true
	case n.Name == "toJSON" && len(n.Arguments) == 1:
		n.Arguments[0] = helper(jsonName, n.Arguments[0])
		return true
	case n.Name == "concat":
		// Every argument is charged its elements before concat builds
		// the whole: 50 ranges of 300,000 built 1.35 GiB first.
		wrapArgs(n.Arguments, elemsName)
		return true
	case n.Name == "trim" && len(n.Arguments) == 2:
		n.Arguments[0] = helper(trimName, n.Arguments[0], n.Arguments[1])
	default:
		wrapArgs(n.Arguments, scanName)
	}
	return false
}

func (p *budgetPatch) patchBinary(node *ast.Node, n *ast.BinaryNode) {
	switch n.Operator {
	case "+":
		// A number on either side makes a number (or an error).
		if !isNumber(n.Left.Type()) && !isNumber(n.Right.Type()) && !isNumberLiteral(n.Left) && !isNumberLiteral(n.Right) {
			wrapNode(node, builtName)
		}
	case "..":
		// Literal bounds: its size is known when the rule compiles
		// (staticCost).
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
		// A map lookup hashes the key.
		if !isLiteral(n.Left) {
			n.Left = helper(strName, n.Left)
		}
	case "contains":
		if !isLiteral(n.Left) {
			n.Left = helper(scanName, n.Left)
		}
		if !isLiteral(n.Right) {
			n.Right = helper(scanName, n.Right)
		}
	case "matches":
		p.patchMatches(node, n)
	case "startsWith", "endsWith":
		if !isLiteral(n.Right) {
			n.Right = helper(scanName, n.Right)
		}
	}
}

// patchMatches turns `s matches pattern` into a metered match. A literal
// pattern is compiled here, once for every rule that writes it (regexps);
// any other is compiled, within the same bounds, when the rule runs.
func (p *budgetPatch) patchMatches(node *ast.Node, n *ast.BinaryNode) {
	var call ast.Node
	if s, ok := n.Right.(*ast.StringNode); ok {
		re, err := p.regexps.get(s.Value)
		if err != nil {
			p.err = patternError(s, err)
			return
		}
		call = helper(matchLitName, n.Left, &ast.ConstantNode{Value: re})
	} else {
		call = helper(matchName, n.Left, n.Right)
	}
	call.SetLocation(n.Location())
	ast.Patch(node, call)
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
// per node, and a range with literal bounds its length. Predicate bodies
// are left out: they pay for themselves on every iteration.
func staticCost(n ast.Node) int64 {
	switch x := n.(type) {
	case nil:
		return 0
	case *ast.PredicateNode:
		return 1
	case *ast.BinaryNode:
		if x.Operator == ".." {
			l, ok1 := x.Left.(*ast.IntegerNode)
			r, ok2 := x.Right.(*ast.IntegerNode)
			if ok1 && ok2 && r.Value >= l.Value {
				return satAdd(3, int64(r.Value)-int64(l.Value)+1)
			}
		}
	}
	var c int64 = 1
	for _, ch := range children(n) {
		c = satAdd(c, staticCost(ch))
	}
	return c
}

// staticBytes is what the ranges with literal bounds in n build when the
// rule runs: expr-lang makes each an array.
func staticBytes(n ast.Node) int64 {
	var b int64
	if x, ok := n.(*ast.BinaryNode); ok && x.Operator == ".." {
		l, ok1 := x.Left.(*ast.IntegerNode)
		r, ok2 := x.Right.(*ast.IntegerNode)
		if ok1 && ok2 && r.Value >= l.Value {
			b = satMul(int64(r.Value)-int64(l.Value)+1, elemBytes)
		}
	}
	for _, ch := range children(n) {
		b = satAdd(b, staticBytes(ch))
	}
	return b
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

// budgetOptions registers the metering helpers, with the regexps their
// matches share. Each returns its last argument unchanged once the meter has
// accepted the charge. Most are called as typed functions once the rule is
// checked (typedCalls); the checker knows them by these registrations.
func budgetOptions(rx *regexps) []expr.Option {
	opts := []expr.Option{
		expr.Function(joinName, meteredJoin),
		expr.Function(replaceName, meteredReplace),
		expr.Function(trimName, meteredTrim),
		expr.Function(splitName, meteredSplit),
		expr.Function(globName, meteredGlob),
		expr.Function(matchLitName, func(p ...any) (any, error) {
			return match(p[0].(*meter), p[1], p[2].(*compiledRegexp))
		}),
		expr.Function(matchName, func(p ...any) (any, error) { return meteredMatch(rx, p...) }),
	}
	for _, name := range slices.Sorted(maps.Keys(unaryHelpers)) {
		f := unaryHelpers[name]
		opts = append(opts, expr.Function(name, func(p ...any) (any, error) {
			return p[1], f(p[0].(*meter), p[1])
		}))
	}
	for _, name := range slices.Sorted(maps.Keys(countedHelpers)) {
		mk := countedHelpers[name]
		opts = append(opts, expr.Function(name, func(p ...any) (any, error) {
			return p[2], mk(int64(p[1].(int)))(p[0].(*meter), p[2])
		}))
	}
	return opts
}
