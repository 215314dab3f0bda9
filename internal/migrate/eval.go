package migrate

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Eval evaluates a SpEL AST over a map-based context (the environment Portal
// builds, see internal/context/pod) with SpEL's semantics, so tests can check
// a migrated rule against the rule it came from:
//
//   - reading a property of null is an error, unless ?. makes it null;
//   - a missing map key reads as null (a POJO field that is not set);
//   - and, or, ! and the ternary condition need booleans: null is an error;
//   - == compares numbers by value; < and friends order null below
//     everything;
//   - matches must match the whole string (Java's String.matches);
//   - a ?: b falls back to b when a is null or the empty string.
//
// Numbers are compared by value whatever their Go type, as JSON numbers are.
func Eval(n Node, env map[string]any) (any, error) {
	switch n := n.(type) {
	case *Literal:
		return n.Value, nil
	case *Ident:
		v, ok := env[n.Name]
		if !ok {
			return nil, errAt(n.At, "property %q not found on the root context", n.Name)
		}
		return v, nil
	case *Property:
		return evalProperty(n, env)
	case *Index:
		return evalIndex(n, env)
	case *List:
		out := make([]any, len(n.Elems))
		for i, e := range n.Elems {
			v, err := Eval(e, env)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *Unary:
		b, err := evalBool(n.X, env, "!")
		if err != nil {
			return nil, err
		}
		return !b, nil
	case *Binary:
		return evalBinary(n, env)
	case *Elvis:
		l, err := Eval(n.L, env)
		if err != nil || (l != nil && l != "") {
			return l, err
		}
		return Eval(n.R, env)
	case *Ternary:
		c, err := evalBool(n.Cond, env, "?:")
		if err != nil {
			return nil, err
		}
		if c {
			return Eval(n.Then, env)
		}
		return Eval(n.Else, env)
	case *Call:
		return evalCall(n, env)
	}
	return nil, fmt.Errorf("internal error: unknown node %T", n)
}

func evalBool(n Node, env map[string]any, op string) (bool, error) {
	v, err := Eval(n, env)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, errAt(n.Pos(), "%s needs a boolean, got %s", op, typeName(v))
	}
	return b, nil
}

func evalProperty(n *Property, env map[string]any) (any, error) {
	x, err := Eval(n.X, env)
	if err != nil {
		return nil, err
	}
	switch m := x.(type) {
	case nil:
		if n.Safe {
			return nil, nil
		}
		return nil, errAt(n.At, "cannot read property %q of null", n.Name)
	case map[string]any:
		return m[n.Name], nil
	}
	return nil, errAt(n.At, "cannot read property %q of %s", n.Name, typeName(x))
}

func evalIndex(n *Index, env map[string]any) (any, error) {
	x, err := Eval(n.X, env)
	if err != nil {
		return nil, err
	}
	i, err := Eval(n.Index, env)
	if err != nil {
		return nil, err
	}
	switch c := x.(type) {
	case map[string]any:
		k, ok := i.(string)
		if !ok {
			return nil, errAt(n.At, "map index must be a string, got %s", typeName(i))
		}
		return c[k], nil
	case []any:
		f, ok := number(i)
		if !ok || f != float64(int(f)) || f < 0 || int(f) >= len(c) {
			return nil, errAt(n.At, "index %v out of bounds for a list of %d", i, len(c))
		}
		return c[int(f)], nil
	}
	return nil, errAt(n.At, "cannot index into %s", typeName(x))
}

func evalBinary(n *Binary, env map[string]any) (any, error) {
	if n.Op == "and" || n.Op == "or" {
		l, err := evalBool(n.L, env, n.Spell)
		if err != nil {
			return nil, err
		}
		if (n.Op == "and" && !l) || (n.Op == "or" && l) {
			return l, nil
		}
		r, err := evalBool(n.R, env, n.Spell)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	l, err := Eval(n.L, env)
	if err != nil {
		return nil, err
	}
	r, err := Eval(n.R, env)
	if err != nil {
		return nil, err
	}
	switch n.Op {
	case "==":
		return spelEqual(l, r), nil
	case "!=":
		return !spelEqual(l, r), nil
	case "matches":
		return evalMatches(n.At, l, r)
	}
	c, err := spelCompare(l, r)
	if err != nil {
		return nil, errAt(n.At, "%v", err)
	}
	switch n.Op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	default: // >=
		return c >= 0, nil
	}
}

func evalMatches(at int, l, r any) (any, error) {
	s, ok1 := l.(string)
	p, ok2 := r.(string)
	if !ok1 || !ok2 {
		return nil, errAt(at, "matches needs a string and a pattern, got %s and %s", typeName(l), typeName(r))
	}
	re, err := regexp.Compile("^(?:" + p + ")$")
	if err != nil {
		return nil, errAt(at, "pattern %q: %v", p, err)
	}
	return re.MatchString(s), nil
}

func evalCall(n *Call, env map[string]any) (any, error) {
	x, err := Eval(n.X, env)
	if err != nil {
		return nil, err
	}
	if x == nil {
		if n.Safe {
			return nil, nil
		}
		return nil, errAt(n.At, "method %s() cannot be called on null", n.Method)
	}
	args := make([]any, len(n.Args))
	for i, a := range n.Args {
		if args[i], err = Eval(a, env); err != nil {
			return nil, err
		}
	}
	v, err := method(x, n.Method, args)
	if err != nil {
		return nil, errAt(n.At, "%v", err)
	}
	return v, nil
}

// method runs a Java method the migrator knows on a non-null receiver.
func method(x any, name string, args []any) (any, error) {
	if m, ok := methods[name]; !ok || len(args) != m.args {
		return nil, fmt.Errorf("method %s/%d not found", name, len(args))
	}
	switch r := x.(type) {
	case []any:
		switch name {
		case "contains":
			for _, e := range r {
				if spelEqual(e, args[0]) {
					return true, nil
				}
			}
			return false, nil
		case "size":
			return int64(len(r)), nil
		case "isEmpty":
			return len(r) == 0, nil
		}
	case map[string]any:
		switch name {
		case "containsKey":
			k, ok := args[0].(string)
			_, found := r[k]
			return ok && found, nil
		case "size":
			return int64(len(r)), nil
		case "isEmpty":
			return len(r) == 0, nil
		}
	case string:
		return stringMethod(r, name, args)
	}
	return nil, fmt.Errorf("method %s() not found on %s", name, typeName(x))
}

func stringMethod(s, name string, args []any) (any, error) {
	switch name {
	case "size":
		return nil, fmt.Errorf("method size() not found on a string (Java strings have length())")
	case "length":
		return int64(utf8.RuneCountInString(s)), nil
	case "isEmpty":
		return s == "", nil
	case "toLowerCase":
		return strings.ToLower(s), nil
	case "toUpperCase":
		return strings.ToUpper(s), nil
	case "containsKey":
		return nil, fmt.Errorf("method containsKey() not found on a string")
	}
	a, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("%s() needs a string argument, got %s", name, typeName(args[0]))
	}
	switch name {
	case "contains":
		return strings.Contains(s, a), nil
	case "startsWith":
		return strings.HasPrefix(s, a), nil
	case "endsWith":
		return strings.HasSuffix(s, a), nil
	}
	return evalMatches(0, s, a)
}

// number returns v as a float64 when it is a number.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case float32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func spelEqual(a, b any) bool {
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	switch av := a.(type) {
	case nil:
		return b == nil
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !spelEqual(av[i], bv[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, v := range av {
			if w, ok := bv[k]; !ok || !spelEqual(v, w) {
				return false
			}
		}
		return true
	case string, bool:
		return a == b
	}
	return false
}

// spelCompare orders two values as SpEL's StandardTypeComparator does: null
// sorts first, numbers by value, strings and booleans naturally.
func spelCompare(a, b any) (int, error) {
	switch {
	case a == nil && b == nil:
		return 0, nil
	case a == nil:
		return -1, nil
	case b == nil:
		return 1, nil
	}
	if fa, ok := number(a); ok {
		if fb, ok := number(b); ok {
			return cmp.Compare(fa, fb), nil
		}
	}
	if sa, ok := a.(string); ok {
		if sb, ok := b.(string); ok {
			return strings.Compare(sa, sb), nil
		}
	}
	if ba, ok := a.(bool); ok {
		if bb, ok := b.(bool); ok {
			return cmp.Compare(boolInt(ba), boolInt(bb)), nil
		}
	}
	return 0, fmt.Errorf("cannot compare %s with %s", typeName(a), typeName(b))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if utf8.RuneCountInString(v) > 20 {
			return "a string"
		}
		return fmt.Sprintf("the string %q", v)
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	if _, ok := number(v); ok {
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
