package exprlang

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/parser"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vilaca/portal/internal/core"
)

// clusterName is the name rules read other objects through:
// cluster.<resource>.byName(ns, name), cluster.<resource>.list(ns, selector),
// and the same under cluster.consistent.
const clusterName = "cluster"

// envName is expr-lang's name for the whole environment.
const envName = "$env"

// lookupName is the helper every lookup is rewritten to. Like fetchName it
// cannot be written in an expression.
const lookupName = "$portal.lookup"

// Lookup methods.
const (
	methodByName = "byName"
	methodList   = "list"
)

// Cluster answers the cluster.* lookups of one rule evaluation. The engine
// binds an implementation as `cluster` in the environment (internal/lookup);
// where none is bound, a lookup fails with an error that says so.
type Cluster interface {
	// ByName returns the object, or nil when there is none.
	ByName(ctx context.Context, resource string, consistent bool, namespace, name string) (map[string]any, error)
	// List returns the objects of the namespace ("" for every namespace
	// the rule may read, or for a cluster-scoped resource) that sel selects.
	// A consistent list that reads the API server charges budget as it
	// reads, page by page, and stops when budget says so.
	List(ctx context.Context, resource string, consistent bool, namespace string, sel labels.Selector, budget core.ReadBudget) ([]any, error)
}

// Lookup costs, in operations: a lookup is a map read or an index scan in
// the cache, a consistent one a round trip to the API server. A list also
// pays one operation and elemBytes per object it returns. A consistent
// lookup returns objects decoded for it alone: they are charged as built
// (what toJSON of them would be charged).
const (
	lookupCost           = 10
	consistentLookupCost = 1000
)

// MaxConsistentReads bounds the cluster.consistent.* reads of one
// evaluation (a rule's expression and message together): each is a quorum
// read of the API server inside an admission request, and a rule that
// loops over them would turn one request into hundreds. Every request
// counts, so a list that needs several pages counts each.
const MaxConsistentReads = 16

// lookups finds every cluster.* lookup of an expression and rejects any
// other use of the name, so a rule's reads are all known when it compiles.
func lookups(tree *parser.Tree) ([]core.Lookup, error) {
	v := &lookupVisitor{}
	ast.Walk(&tree.Node, v)
	// Walk visits children first, so a cluster identifier is known to be
	// part of a lookup only once the walk is over.
	if err := v.check(tree.Node); err != nil {
		return nil, err
	}
	return v.found, nil
}

type lookupVisitor struct {
	found []core.Lookup
	// calls holds the cluster identifiers that are part of a lookup call.
	calls map[*ast.IdentifierNode]bool
	err   error
}

func (v *lookupVisitor) Visit(node *ast.Node) {
	if v.err != nil {
		return
	}
	if n, isCall := (*node).(*ast.CallNode); isCall {
		l, id, ok, err := parseLookup(n)
		if err != nil {
			v.err = err
			return
		}
		if ok {
			if v.calls == nil {
				v.calls = map[*ast.IdentifierNode]bool{}
			}
			v.calls[id] = true
			if !slices.ContainsFunc(v.found, func(f core.Lookup) bool {
				return f.Resource == l.Resource && f.Method == l.Method && f.Consistent == l.Consistent
			}) {
				v.found = append(v.found, l)
			}
		}
	}
}

// check rejects a cluster identifier outside a lookup call.
func (v *lookupVisitor) check(root ast.Node) error {
	if v.err != nil {
		return v.err
	}
	var bad, env *ast.IdentifierNode
	ast.Walk(&root, visitorFunc(func(node *ast.Node) {
		id, ok := (*node).(*ast.IdentifierNode)
		switch {
		case !ok:
		case id.Value == envName && env == nil:
			env = id
		case id.Value == clusterName && !v.calls[id] && bad == nil:
			bad = id
		}
	}))
	if env != nil {
		// $env.cluster would call the binding's methods directly, past
		// the lookup helper that meters, counts and confines each read.
		return &core.CompileError{Offset: env.Location().From, Err: errors.New(
			"$env is not available in rules: read the names directly (object, metadata, cluster.<resource>.byName, ...)")}
	}
	if bad != nil {
		return &core.CompileError{Offset: bad.Location().From, Err: errors.New(
			"cluster is only read through lookups: cluster.<resource>.byName(namespace, name) or cluster.<resource>.list(namespace, selector), or the same under cluster.consistent")}
	}
	return nil
}

type visitorFunc func(*ast.Node)

func (f visitorFunc) Visit(n *ast.Node) { f(n) }

// parseLookup recognises cluster[.consistent].<resource>.<method>(args). ok
// is false for calls that do not start at cluster; err is set for calls that
// do but have the wrong shape.
func parseLookup(n *ast.CallNode) (l core.Lookup, id *ast.IdentifierNode, ok bool, err error) {
	method, isMember := n.Callee.(*ast.MemberNode)
	if !isMember || !method.Method {
		return l, nil, false, nil
	}
	res, isMember := method.Node.(*ast.MemberNode)
	if !isMember {
		return l, nil, false, nil
	}
	base := res.Node
	consistent := false
	if c, isMember := base.(*ast.MemberNode); isMember {
		if s, isStr := c.Property.(*ast.StringNode); isStr && s.Value == "consistent" {
			base, consistent = c.Node, true
		}
	}
	id, isID := base.(*ast.IdentifierNode)
	if !isID || id.Value != clusterName {
		return l, nil, false, nil
	}
	fail := func(at ast.Node, format string, args ...any) (core.Lookup, *ast.IdentifierNode, bool, error) {
		return l, nil, false, &core.CompileError{Offset: at.Location().From, Err: fmt.Errorf(format, args...)}
	}
	name, isStr := res.Property.(*ast.StringNode)
	if !isStr || name.Value == "" {
		return fail(res.Property, "cluster.<resource>: the resource must be a constant plural name (cluster.deployments, cluster[\"widgets.example.com\"]), not a computed value")
	}
	if res.Optional || method.Optional {
		return fail(res.Property, "cluster.%s: write lookups without ?.", name.Value)
	}
	m, _ := method.Property.(*ast.StringNode)
	switch {
	case m == nil:
		return fail(method, "cluster.%s: call byName(namespace, name) or list(namespace, selector)", name.Value)
	case m.Value != methodByName && m.Value != methodList:
		return fail(m, "cluster.%s.%s: unknown lookup; call byName(namespace, name) or list(namespace, selector)", name.Value, m.Value)
	case len(n.Arguments) != 2:
		what := "namespace, name"
		if m.Value == methodList {
			what = "namespace, selector"
		}
		return fail(m, "cluster.%s.%s takes 2 arguments (%s), got %d; use \"\" as the namespace of cluster-scoped resources", name.Value, m.Value, what, len(n.Arguments))
	}
	return core.Lookup{Resource: name.Value, Method: m.Value, Consistent: consistent}, id, true, nil
}

// lookupPatch rewrites every lookup into a call of the lookup helper with the
// evaluation's meter and the bound cluster. It runs before fetchPatch, which
// would turn cluster.<resource> into a field read.
type lookupPatch struct{}

func (lookupPatch) Visit(node *ast.Node) {
	n, ok := (*node).(*ast.CallNode)
	if !ok {
		return
	}
	l, id, ok, err := parseLookup(n)
	if !ok || err != nil {
		return
	}
	call := &ast.CallNode{
		Callee: &ast.IdentifierNode{Value: lookupName},
		Arguments: append([]ast.Node{
			&ast.IdentifierNode{Value: meterName},
			id,
			&ast.StringNode{Value: l.Resource},
			&ast.StringNode{Value: l.Method},
			&ast.BoolNode{Value: l.Consistent},
		}, n.Arguments...),
	}
	call.SetLocation(n.Location())
	ast.Patch(node, call)
}

func lookupOption() expr.Option {
	return expr.Function(lookupName, lookup)
}

// lookup runs one lookup: p is the meter, the bound cluster, the resource,
// the method, whether it is consistent, and the call's two arguments.
func lookup(p ...any) (any, error) {
	m, _ := p[0].(*meter)
	resource, _ := p[2].(string)
	method, _ := p[3].(string)
	consistent, _ := p[4].(bool)
	what := "cluster." + resource + "." + method
	if consistent {
		what = "cluster.consistent." + resource + "." + method
	}
	c, ok := p[1].(Cluster)
	if !ok {
		return nil, fmt.Errorf("%s: cluster lookups are not available here (portal eval reads them from --cluster-state)", what)
	}
	cost := int64(lookupCost)
	if consistent {
		cost = consistentLookupCost
	}
	if err := m.charge(cost, 0); err != nil {
		return nil, err
	}
	if consistent {
		if err := m.apiRead(); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	ns, ok := p[5].(string)
	if !ok && p[5] != nil {
		return nil, fmt.Errorf("%s: the namespace must be a string, got %T", what, p[5])
	}
	ctx := m.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if method == methodByName {
		name, ok := p[6].(string)
		if !ok {
			return nil, fmt.Errorf("%s: the name must be a string, got %T", what, p[6])
		}
		obj, err := c.ByName(ctx, resource, consistent, ns, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if obj == nil {
			return nil, nil
		}
		if consistent {
			if err := m.expand(obj); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
		}
		return obj, nil
	}
	sel, err := Selector(p[6])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	rb := &readBudget{m: m}
	items, err := c.List(ctx, resource, consistent, ns, sel, rb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	n := int64(len(items))
	switch {
	case consistent && !rb.charged:
		// Read from the cache (outside admission): charged as the API
		// server's answer would have been, so the verdict does not
		// depend on where the rule runs.
		err = m.expand(items)
	case !consistent:
		err = m.charge(n, satMul(n, elemBytes))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return items, nil
}

// readBudget is the meter as a consistent list spends it. It is a type of
// its own because a rule can reach the meter's value through $env, so the
// meter has no exported methods.
type readBudget struct {
	m *meter
	// charged is set once the list charged what it read itself.
	charged bool
}

var _ core.ReadBudget = (*readBudget)(nil)

func (b *readBudget) Request() error { return b.m.apiRead() }

func (b *readBudget) Charge(objs []map[string]any) error {
	b.charged = true
	if err := b.m.charge(int64(len(objs)), satMul(int64(len(objs)), elemBytes)); err != nil {
		return err
	}
	for _, o := range objs {
		if err := b.m.expand(o); err != nil {
			return err
		}
	}
	return nil
}

func (b *readBudget) BytesLeft() int64 { return max(b.m.maxBytes-b.m.bytes, 0) }
