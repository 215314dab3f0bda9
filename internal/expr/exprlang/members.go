package exprlang

import (
	"slices"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"

	"github.com/vilaca/portal/internal/core"
)

// members lists the chains of constant field reads from the environment's
// names in an expression, as written (before patches rewrite member access),
// so the engine can check them against the context builders' schemas.
func members(tree *parser.Tree, names []string) []core.Member {
	if tree == nil {
		return nil
	}
	v := &memberVisitor{seen: map[string]bool{}, names: names}
	ast.Walk(&tree.Node, v)
	return v.out
}

type memberVisitor struct {
	out   []core.Member
	seen  map[string]bool
	names []string
}

func (v *memberVisitor) Visit(node *ast.Node) {
	if _, ok := (*node).(*ast.MemberNode); !ok {
		return
	}
	var (
		path []string
		offs []int
	)
	for n := *node; ; {
		switch x := n.(type) {
		case *ast.MemberNode:
			s, isName := x.Property.(*ast.StringNode)
			if !isName || x.Method {
				// A computed key or a method call: what follows it is
				// not a field of the schema.
				path, offs = nil, nil
			} else {
				path = append(path, s.Value)
				offs = append(offs, s.Location().From)
			}
			n = x.Node
			continue
		case *ast.ChainNode:
			n = x.Node
			continue
		case *ast.IdentifierNode:
			if len(path) > 0 && slices.Contains(v.names, x.Value) {
				path = append(path, x.Value)
				offs = append(offs, x.Location().From)
				slices.Reverse(path)
				slices.Reverse(offs)
				if key := strings.Join(path, "."); !v.seen[key] {
					v.seen[key] = true
					v.out = append(v.out, core.Member{Path: path, Offsets: offs})
				}
			}
		}
		return
	}
}

// Members implements the engine's member listing: the field chains the
// expression reads from its environment.
func (p *program) Members() []core.Member { return p.members }
