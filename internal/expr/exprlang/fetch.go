package exprlang

import (
	"fmt"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm/runtime"
)

// fetchName is the helper member access is rewritten to. The name cannot be
// written in an expression, so rules cannot call it directly.
const fetchName = "$portal.fetch"

// fetchPatch rewrites a.b (not a?.b, not method calls) into a call of fetch.
// expr-lang reads members of map values through reflection; every object a
// rule sees is a map[string]any, and a type switch reads it several times
// faster. Optional members stay as they are so ?. keeps its short-circuit.
type fetchPatch struct{}

func (fetchPatch) Visit(node *ast.Node) {
	m, ok := (*node).(*ast.MemberNode)
	if !ok || m.Optional || m.Method {
		return
	}
	if _, ok := m.Property.(*ast.StringNode); !ok {
		return
	}
	call := &ast.CallNode{
		Callee:    &ast.IdentifierNode{Value: fetchName},
		Arguments: []ast.Node{m.Node, m.Property},
	}
	call.SetLocation(m.Location())
	ast.Patch(node, call)
}

// fetchOption registers fetch for the checker; the VM calls its typed form
// (typedCalls).
func fetchOption() expr.Option {
	return expr.Function(fetchName, func(p ...any) (any, error) { return fetch(p[0], p[1]) }, new(func(any, string) any))
}

func fetch(from, property any) (any, error) {
	key, _ := property.(string)
	switch from := from.(type) {
	case map[string]any:
		return from[key], nil
	case nil:
		return nil, fmt.Errorf("cannot fetch %s from <nil>", key)
	}
	// Anything else (a struct from a helper, a typed map) keeps expr-lang's
	// own semantics.
	return runtime.Fetch(from, key), nil
}
