package core

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Env is the set of top-level names a rule expression sees.
type Env = map[string]any

// ExpressionEngine compiles rule expressions. There is one implementation,
// internal/expr/exprlang, which whoever builds a rule engine (the manager,
// portal eval, portal test) hands to it; rules do not name their engine.
type ExpressionEngine interface {
	Name() string
	// Compile checks an expression once so that evaluation never parses.
	Compile(expression string) (Program, error)
}

// Program is a compiled expression. Eval must be safe for concurrent use (on
// distinct envs) and must bound its own cost: a pathological expression
// returns an error wrapping ErrBudgetExceeded, it never hangs, and it returns
// soon after ctx ends.
type Program interface {
	Eval(ctx context.Context, env Env) (any, error)
	// EvalShared is Eval drawing on acct: it starts from what acct has
	// spent and adds what it spends, and fails at once when acct has
	// spent the budget already. The rule engine passes one Account to a
	// rule's expression and to every hole of its message, so a message
	// cannot multiply the budget by its number of holes.
	EvalShared(ctx context.Context, env Env, acct *Account) (any, error)
	// Identifiers lists the top-level names the expression reads, so callers
	// can tell container-scoped rules and lookups apart without parsing.
	Identifiers() []string
}

// CompileError is an expression that does not compile, with where: tools
// point at the character of the file the expression came from.
type CompileError struct {
	// Field is the rule field holding the expression ("rule", "message"),
	// empty when the engine does not know.
	Field string
	// Offset is the rune offset of the problem in that field's value; -1
	// when unknown.
	Offset int
	Err    error
}

func (e *CompileError) Error() string { return e.Err.Error() }
func (e *CompileError) Unwrap() error { return e.Err }

// Request carries the admission request fields rules see as request.*.
type Request struct {
	Operation string
	UserInfo  map[string]any
	DryRun    bool
	OldObject map[string]any
}

// Container is one container of a pod-shaped object, ready to be bound as
// `container` in a rule's environment.
type Container struct {
	Name  string
	Type  string
	Sugar map[string]any
}

// EvalContext is everything a rule evaluation needs about one object.
type EvalContext struct {
	Env        Env
	Containers []Container
}

// ContextBuilder turns a raw object into the environment rules see.
type ContextBuilder interface {
	Supports(gvk schema.GroupVersionKind) bool
	// Build must not modify obj. The maps it makes come from maps (nil:
	// made anew).
	Build(obj *unstructured.Unstructured, req *Request, maps Maps) (*EvalContext, error)
	// Release hands the maps Build made for ec back to maps, and none of
	// the object's: its caller is done with ec.
	Release(ec *EvalContext, maps Maps)
}

// Maps lends a ContextBuilder the maps it builds an environment from, and
// takes them back (internal/reuse.Pool: portal eval's workers keep one
// each, so an object's environment fills the last one's maps).
type Maps interface {
	// Map returns an empty map; a new one is made for size entries.
	Map(size int) map[string]any
	// PutMap empties m and keeps it for a later Map.
	PutMap(m map[string]any)
}

// Schema describes the shape of a name a context builder binds, so that a
// misspelt field (container.imag) is a compile error instead of a nil on
// every object. A schema with Fields lists every field its map has; Open
// means any key may follow (object, labels, container.raw); neither is a leaf
// value (a string, a number, a list) that has no fields.
type Schema struct {
	Fields map[string]*Schema
	Open   bool
	// Type is a leaf's value type in the words of a load error
	// ("a string", "a number", "a list", "a boolean"); empty when
	// unknown. A rule whose whole expression is a leaf that is not a
	// boolean cannot decide anything, so it is refused at load.
	Type string
}

// Member is one chain of field reads in an expression, from a top-level
// name: container.image.tag is Path [container image tag]. Offsets holds the
// rune offset of each element in the expression, for errors. A chain stops
// where a field is not a constant name (an index, a computed key).
type Member struct {
	Path    []string
	Offsets []int
}
