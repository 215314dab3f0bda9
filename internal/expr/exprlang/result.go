package exprlang

import (
	"reflect"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
)

// typeWords names the type of what an expression evaluates to when the
// type checker knows it before any object is seen ("a string" for "latest"
// or upper(x), "a number" for len(x)), and "" when it does not (a field
// read, whose value depends on the object) or when it is a boolean. compile
// asks the checker on the unpatched tree: the budget patches turn most
// nodes into calls of unknown type.
func typeWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a map"
	}
	return ""
}

// ResultType implements the engine's result check: the expression's type
// when the checker knows it and it is not a boolean.
func (p *program) ResultType() string { return p.result }

// WholeMember implements the engine's result check: the field chain that
// is the whole expression (container.image.tag), or nil.
func (p *program) WholeMember() []string { return p.whole }

// wholeMember returns the path of the chain of constant field reads from
// one of names that makes up the whole of tree, or nil.
func wholeMember(tree *parser.Tree, names []string) []string {
	if tree == nil {
		return nil
	}
	var path []string
	for n := tree.Node; ; {
		switch x := n.(type) {
		case *ast.ChainNode:
			n = x.Node
		case *ast.MemberNode:
			s, ok := x.Property.(*ast.StringNode)
			if !ok || x.Method {
				return nil
			}
			path = append([]string{s.Value}, path...)
			n = x.Node
		case *ast.IdentifierNode:
			for _, name := range names {
				if name == x.Value {
					return append([]string{x.Value}, path...)
				}
			}
			return nil
		default:
			return nil
		}
	}
}
