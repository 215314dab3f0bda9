package migrate

// The SpEL AST. Every node records the byte offset in the source expression
// where it starts, so errors can point at the construct.

// Node is a SpEL expression node.
type Node interface {
	Pos() int
}

// Literal is a string, number, boolean or null literal. Value is a string,
// int64, float64, bool or nil; Text is the number as written (suffix
// stripped), for printing.
type Literal struct {
	At    int
	Value any
	Text  string
}

// Ident is a name on the root context: container, spec, metadata, ...
type Ident struct {
	At   int
	Name string
}

// Property is X.Name, or X?.Name when Safe.
type Property struct {
	At   int
	X    Node
	Name string
	Safe bool
}

// Index is X[Index].
type Index struct {
	At    int
	X     Node
	Index Node
}

// Call is the method call X.Method(Args...), or X?.Method(Args...) when Safe.
type Call struct {
	At     int
	X      Node
	Method string
	Args   []Node
	Safe   bool
}

// List is an inline list {a, b, c}.
type List struct {
	At    int
	Elems []Node
}

// Unary is !X (Spell "!") or not X (Spell "not").
type Unary struct {
	At    int
	Spell string
	X     Node
}

// Binary is L Op R. Op is one of and, or, ==, !=, <, <=, >, >=, matches;
// Spell is how the source wrote and/or ("and", "&&", ...), kept in the output.
type Binary struct {
	At    int
	Op    string
	Spell string
	L, R  Node
}

// Elvis is L ?: R.
type Elvis struct {
	At   int
	L, R Node
}

// Ternary is Cond ? Then : Else.
type Ternary struct {
	At               int
	Cond, Then, Else Node
}

func (n *Literal) Pos() int  { return n.At }
func (n *Ident) Pos() int    { return n.At }
func (n *Property) Pos() int { return n.At }
func (n *Index) Pos() int    { return n.At }
func (n *Call) Pos() int     { return n.At }
func (n *List) Pos() int     { return n.At }
func (n *Unary) Pos() int    { return n.At }
func (n *Binary) Pos() int   { return n.At }
func (n *Elvis) Pos() int    { return n.At }
func (n *Ternary) Pos() int  { return n.At }

// Walk calls fn for n and every node under it, parents first.
func Walk(n Node, fn func(Node)) {
	if n == nil {
		return
	}
	fn(n)
	switch n := n.(type) {
	case *Property:
		Walk(n.X, fn)
	case *Index:
		Walk(n.X, fn)
		Walk(n.Index, fn)
	case *Call:
		Walk(n.X, fn)
		for _, a := range n.Args {
			Walk(a, fn)
		}
	case *List:
		for _, e := range n.Elems {
			Walk(e, fn)
		}
	case *Unary:
		Walk(n.X, fn)
	case *Binary:
		Walk(n.L, fn)
		Walk(n.R, fn)
	case *Elvis:
		Walk(n.L, fn)
		Walk(n.R, fn)
	case *Ternary:
		Walk(n.Cond, fn)
		Walk(n.Then, fn)
		Walk(n.Else, fn)
	}
}

// UsesName reports whether the expression reads the root name.
func UsesName(n Node, name string) bool {
	found := false
	Walk(n, func(n Node) {
		if id, ok := n.(*Ident); ok && id.Name == name {
			found = true
		}
	})
	return found
}
