package migrate

import (
	"slices"
	"strings"
)

// methods are the Java methods the migrator translates, with their arity and
// the receiver kinds they exist on.
var methods = map[string]struct {
	args      int
	receivers []kind
}{
	"contains":    {1, []kind{kList, kString}},
	"containsKey": {1, []kind{kMap}},
	"startsWith":  {1, []kind{kString}},
	"endsWith":    {1, []kind{kString}},
	"matches":     {1, []kind{kString}},
	"size":        {0, []kind{kList, kMap}},
	"length":      {0, []kind{kString}},
	"isEmpty":     {0, []kind{kList, kMap, kString}},
	"toLowerCase": {0, []kind{kString}},
	"toUpperCase": {0, []kind{kString}},
}

// MethodNames lists the translated methods, for documentation and errors.
func MethodNames() []string {
	names := make([]string, 0, len(methods))
	for m := range methods {
		names = append(names, m)
	}
	slices.Sort(names)
	return names
}

func call(n *Call) (frag, error) {
	m, ok := methods[n.Method]
	if !ok {
		return frag{}, errAt(n.At, "method call .%s() has no expr-lang translation (the migrator translates %s)", n.Method, strings.Join(MethodNames(), ", "))
	}
	if len(n.Args) != m.args {
		return frag{}, errAt(n.At, "%s() takes %d argument(s), got %d", n.Method, m.args, len(n.Args))
	}
	rk := kindOf(n.X)
	if rk != kUnknown && !slices.Contains(m.receivers, rk) {
		hint := ""
		if n.Method == "contains" && rk == kMap {
			hint = "; use containsKey() for a map key"
		}
		return frag{}, errAt(n.At, "%s() called on %s%s", n.Method, rk, hint)
	}
	x, err := tr(n.X)
	if err != nil {
		return frag{}, err
	}
	var arg frag
	if m.args == 1 {
		if arg, err = tr(n.Args[0]); err != nil {
			return frag{}, err
		}
	}
	switch n.Method {
	case "contains":
		return contains(x, arg, rk), nil
	case "containsKey":
		// expr-lang's in tests a map's keys. Like startsWith and endsWith
		// below it yields false on nil, which is also what ?. would give
		// at the top level of a rule (null: no violation).
		return infix(arg, "in", x), nil
	case "startsWith", "endsWith":
		return infix(x, n.Method, arg), nil
	case "matches":
		return matches(n.At, x, n.Args[0])
	}
	// The remaining translations fail on nil where SpEL's ?. yields null, so a
	// null-safe call keeps that explicitly.
	var out frag
	switch n.Method {
	case "size", "length":
		out = primary("len(" + x.s + ")")
	case "isEmpty":
		out = frag{s: "len(" + x.s + ") == 0", prec: precCmp}
	case "toLowerCase":
		out = primary("lower(" + x.s + ")")
	case "toUpperCase":
		out = primary("upper(" + x.s + ")")
	}
	if n.Safe {
		return frag{s: wrap(x, precCmp+1) + " == nil ? nil : " + wrap(out, precOr), prec: precTernary}, nil
	}
	return out, nil
}

// contains translates x.contains(arg): membership for a list, substring for a
// string. When the receiver's type is unknown (object.* paths) the choice is
// made at run time.
func contains(x, arg frag, rk kind) frag {
	switch rk {
	case kList:
		return infix(arg, "in", x)
	case kString:
		return infix(x, "contains", arg)
	}
	xs, as := wrap(x, precCmp+1), wrap(arg, precCmp+1)
	return frag{
		s:    "type(" + x.s + `) == "string" ? ` + xs + " contains " + as + " : " + as + " in " + xs,
		prec: precTernary,
	}
}
