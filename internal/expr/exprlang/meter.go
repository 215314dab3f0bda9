package exprlang

import (
	"context"
	"fmt"
	"math"
	"reflect"

	"github.com/vilaca/portal/internal/core"
)

// Limits bound one evaluation of one expression.
type Limits struct {
	// Operations is the most operations an evaluation may run: every AST
	// node executed counts one (so every operator, function call and loop
	// iteration of all/any/none/one/filter/map/reduce/count/find/...), and
	// operations whose cost grows with their input count one per element
	// and one per 16 bytes of string they read.
	Operations int64
	// Bytes is the most an evaluation may build: the bytes of every string,
	// and 16 per element of every array and map, that an operator or a
	// function makes (concatenation, join, replace, toJSON, map, filter,
	// flatten, ...). It is cumulative: a string built and dropped still counts.
	Bytes int64
}

// Default limits. Every shipped rule, even over a pod with 50 containers of
// 50 environment variables each, stays under a ten-thousandth of them
// (examples/budget_test.go checks a hundredth). DefaultOperations matches
// the per-expression cost limit of the API server's CEL (PerCallLimit); an
// evaluation that spends all of it runs for tens of milliseconds.
const (
	DefaultOperations = 1_000_000
	DefaultBytes      = 8 << 20
)

// DefaultLimits returns DefaultOperations and DefaultBytes.
func DefaultLimits() Limits { return Limits{Operations: DefaultOperations, Bytes: DefaultBytes} }

const (
	// maxDepth bounds how deeply nested a value the meter measures; values
	// nested deeper make the evaluation fail instead of recursing in
	// encoders and comparisons.
	maxDepth = 1000
	// elemBytes is what one array or map element is charged.
	elemBytes = 16
	// bytesPerOp is how many bytes of string one operation reads.
	bytesPerOp = 16
)

// meter is one evaluation's account. Its methods are unexported so a rule
// that reaches it through $env cannot call them.
type meter struct {
	ops, bytes       int64
	maxOps, maxBytes int64
	// reads counts the cluster.consistent.* reads (MaxConsistentReads).
	reads int64
	ctx   context.Context
	done  <-chan struct{}
	// stack is deep's, kept between walks.
	stack []item
}

// keptStack bounds the deep stack a pooled meter keeps between evaluations.
const keptStack = 4096

// reset starts an evaluation that draws on acct.
func (m *meter) reset(ctx context.Context, l Limits, acct *core.Account) {
	if cap(m.stack) > keptStack {
		m.stack = nil
	}
	*m = meter{ops: acct.Operations, bytes: acct.Bytes, reads: acct.APIReads, maxOps: l.Operations, maxBytes: l.Bytes, ctx: ctx, done: ctx.Done(), stack: m.stack[:0]}
}

// settle leaves what the evaluations drawing on acct have spent in it.
func (m *meter) settle(acct *core.Account) {
	acct.Operations, acct.Bytes, acct.APIReads = m.ops, m.bytes, m.reads
}

// charge adds ops and bytes and fails when either budget is spent or the
// evaluation's context has ended.
func (m *meter) charge(ops, bytes int64) error {
	m.ops = satAdd(m.ops, ops)
	m.bytes = satAdd(m.bytes, bytes)
	if m.ops > m.maxOps {
		return &core.BudgetError{Kind: core.BudgetOperations, Limit: m.maxOps}
	}
	if m.bytes > m.maxBytes {
		return &core.BudgetError{Kind: core.BudgetBytes, Limit: m.maxBytes}
	}
	if m.done != nil {
		select {
		case <-m.done:
			return &core.BudgetError{Kind: core.BudgetDeadline, Err: context.Cause(m.ctx)}
		default:
		}
	}
	return nil
}

// apiRead counts one cluster.consistent.* read and fails past
// MaxConsistentReads.
func (m *meter) apiRead() error {
	m.reads++
	if m.reads > MaxConsistentReads {
		return &core.BudgetError{Kind: core.BudgetAPIReads, Limit: MaxConsistentReads}
	}
	return nil
}

func satAdd(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// shallow is what building v cost: its bytes if a string, its elements if
// an array or map. Nested values were charged when they were built.
func shallow(v any) (elems, bytes int64) {
	switch x := v.(type) {
	case nil, bool, int, int64, float64:
		return 0, 0
	case string:
		return 0, int64(len(x))
	case []any:
		return int64(len(x)), int64(len(x)) * elemBytes
	case map[string]any:
		return int64(len(x)), int64(len(x)) * elemBytes
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return 0, int64(rv.Len())
	case reflect.Slice, reflect.Array, reflect.Map:
		return int64(rv.Len()), int64(rv.Len()) * elemBytes
	}
	return 0, 0
}

// length is the number of elements a predicate visits in v.
func length(v any) int64 {
	switch x := v.(type) {
	case []any:
		return int64(len(x))
	case []int:
		return int64(len(x))
	case []string:
		return int64(len(x))
	case nil:
		return 0
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map, reflect.String:
		return int64(rv.Len())
	}
	return 0
}

// deep measures v as an encoder or a deep comparison would walk it: every
// element of every nested array and map, every byte of every string, with
// values shared between branches counted each time they are reached. It
// stops (with an error) once the count passes limit or the nesting passes
// maxDepth, so the walk itself is bounded. Scalars are counted where they
// are found and only containers are stacked, on the meter's own stack, so
// measuring a flat array allocates nothing.
func (m *meter) deep(v any, limit int64) (elems, bytes int64, err error) {
	stack := append(m.stack[:0], item{v, 0})
	defer func() { m.stack = stack[:0] }()
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.depth > maxDepth {
			return elems, bytes, &core.BudgetError{Kind: core.BudgetDepth, Limit: maxDepth}
		}
		elems++
		switch x := it.v.(type) {
		case string:
			bytes += int64(len(x))
		case []any:
			for _, e := range x {
				if b, scalar := scalarBytes(e); scalar {
					elems++
					bytes += b
				} else {
					stack = append(stack, item{e, it.depth + 1})
				}
			}
		case map[string]any:
			for k, e := range x {
				bytes += int64(len(k))
				if b, scalar := scalarBytes(e); scalar {
					elems++
					bytes += b
				} else {
					stack = append(stack, item{e, it.depth + 1})
				}
			}
		case nil, bool, int, int64, float64, []int, []float64:
			if n := length(x); n > 0 {
				elems += n
			}
		case []string:
			// What split and keys return: counted in place, where the
			// reflection below would box every element.
			elems += int64(len(x))
			for _, e := range x {
				bytes += int64(len(e))
			}
		default:
			rv := reflect.ValueOf(x)
			switch rv.Kind() {
			case reflect.String:
				bytes += int64(rv.Len())
			case reflect.Slice, reflect.Array:
				for i := range rv.Len() {
					stack = append(stack, item{rv.Index(i).Interface(), it.depth + 1})
				}
			case reflect.Map:
				it2 := rv.MapRange()
				for it2.Next() {
					stack = append(stack, item{it2.Key().Interface(), it.depth + 1}, item{it2.Value().Interface(), it.depth + 1})
				}
			}
		}
		if elems+bytes/bytesPerOp > limit {
			return elems, bytes, errTooBig
		}
	}
	return elems, bytes, nil
}

// item is a value deep has still to measure, and how deeply it is nested.
type item struct {
	v     any
	depth int
}

// scalarBytes reports whether v is a scalar deep counts in place, and its
// bytes.
func scalarBytes(v any) (int64, bool) {
	switch x := v.(type) {
	case nil, bool, int, int64, float64:
		return 0, true
	case string:
		return int64(len(x)), true
	}
	return 0, false
}

// errTooBig is deep's signal that the value alone exceeds what is left of
// the budget; callers turn it into the budget error.
var errTooBig = fmt.Errorf("value exceeds the evaluation budget")

// left is the budget m has left, in operations.
func (m *meter) left() int64 { return max(m.maxOps-m.ops, 0) }

// scan charges reading v deeply (comparisons, encoders, searches).
func (m *meter) scan(v any) error {
	elems, bytes, err := m.deep(v, m.left())
	if err == errTooBig {
		return m.charge(math.MaxInt64, 0)
	}
	if err != nil {
		return err
	}
	return m.charge(elems+bytes/bytesPerOp, 0)
}

// scanTimes charges reading v deeply times times (a sort compares each
// element once per level).
func (m *meter) scanTimes(v any, times int64) error {
	elems, bytes, err := m.deep(v, m.left()/max(times, 1))
	if err == errTooBig {
		return m.charge(math.MaxInt64, 0)
	}
	if err != nil {
		return err
	}
	return m.charge(satMul(elems+bytes/bytesPerOp, times), 0)
}

// expand charges reading v deeply and building a value as large as v is
// when expanded (toJSON, string, flatten): shared branches count each time.
func (m *meter) expand(v any) error {
	elems, bytes, err := m.deep(v, m.left())
	if err == errTooBig {
		return m.charge(math.MaxInt64, 0)
	}
	if err != nil {
		return err
	}
	return m.charge(elems+bytes/bytesPerOp, satAdd(satMul(elems, elemBytes), bytes))
}

// built charges a value an operator or function just made.
func (m *meter) built(v any) error {
	elems, bytes := shallow(v)
	return m.charge(1+elems+bytes/bytesPerOp, bytes)
}

// indentedJSON charges toJSON(v) what it reads and what it makes before it
// makes it: expr-lang's toJSON indents, so every line of a value nested d
// deep carries 2d spaces, and escaping can make a byte six. Charged as if
// the value were flat, a value repeated and nested 900 deep made gigabytes
// under an 8 MiB budget.
func (m *meter) indentedJSON(v any) error {
	var (
		elems, size int64
		limitOps    = m.left()
		limitBytes  = max(m.maxBytes-m.bytes, 0)
		stack       = append(m.stack[:0], item{v, 0})
	)
	defer func() { m.stack = stack[:0] }()
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if it.depth > maxDepth {
			return &core.BudgetError{Kind: core.BudgetDepth, Limit: maxDepth}
		}
		elems++
		// Its line: a newline, the indentation, a comma.
		line := int64(2*it.depth + 2)
		switch x := it.v.(type) {
		case string:
			size += line + jsonStringSize(x)
		case []any:
			size += line + 2 + int64(2*it.depth+1)
			for _, e := range x {
				stack = append(stack, item{e, it.depth + 1})
			}
		case map[string]any:
			size += line + 2 + int64(2*it.depth+1)
			for k, e := range x {
				size += jsonStringSize(k) + 2
				stack = append(stack, item{e, it.depth + 1})
			}
		default:
			rv := reflect.ValueOf(x)
			switch rv.Kind() {
			case reflect.String:
				size += line + jsonStringSize(rv.String())
			case reflect.Slice, reflect.Array:
				size += line + 2 + int64(2*it.depth+1)
				for i := range rv.Len() {
					stack = append(stack, item{rv.Index(i).Interface(), it.depth + 1})
				}
			case reflect.Map:
				size += line + 2 + int64(2*it.depth+1)
				iter := rv.MapRange()
				for iter.Next() {
					size += 2 + int64(len(fmt.Sprint(iter.Key().Interface()))) + 2
					stack = append(stack, item{iter.Value().Interface(), it.depth + 1})
				}
			default:
				// Numbers, booleans, null, times: at most a float's 24.
				size += line + 24
			}
		}
		if size > limitBytes {
			return m.charge(0, math.MaxInt64)
		}
		if elems+size/bytesPerOp > limitOps {
			return m.charge(math.MaxInt64, 0)
		}
	}
	return m.charge(elems+size/bytesPerOp, size)
}

// jsonStringSize is the size of s as encoding/json writes it: quoted, with
// control characters, quotes, backslashes and <, > and & escaped (the
// longest escapes take six bytes).
func jsonStringSize(s string) int64 {
	n := int64(len(s)) + 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '<', c == '>', c == '&':
			n += 5
		case c == '"', c == '\\':
			n++
		}
	}
	return n
}
