package migrate

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// expr-lang operator precedences (github.com/expr-lang/expr/parser/operator).
const (
	precTernary  = 0
	precOr       = 10
	precAnd      = 15
	precCmp      = 20
	precNot      = 50
	precNeg      = 90
	precCoalesce = 500
	precPrimary  = 1000

	// precMixed is the precedence a ?? b reports to its parent: expr-lang
	// refuses to mix ?? with other operators without parentheses, so every
	// operator parent wraps it. Null-guarded comparisons use it too.
	precMixed = precTernary + 1
)

// lineWidth is where Translate starts breaking a long top-level and/or chain
// onto one operand per line.
const lineWidth = 80

// frag is a translated expression: its text, the precedence of its top
// operator (so parents know when to parenthesise), and, for membership-style
// operators, the negated form (x not in y).
type frag struct {
	s        string
	prec     int
	neg      string
	coalesce bool // a ?? b
}

func primary(s string) frag { return frag{s: s, prec: precPrimary} }

// wrap parenthesises f unless it binds at least as tightly as min.
func wrap(f frag, min int) string {
	if f.prec < min {
		return "(" + f.s + ")"
	}
	return f.s
}

// Expression translates a SpEL expression into expr-lang.
func Expression(src string) (string, error) {
	n, err := Parse(src)
	if err != nil {
		return "", err
	}
	return Translate(n)
}

// Translate prints a SpEL AST as the equivalent expr-lang expression. A long
// top-level and/or chain is broken onto one operand per line.
func Translate(n Node) (string, error) {
	f, err := tr(n)
	if err != nil {
		return "", err
	}
	b, ok := n.(*Binary)
	if !ok || (b.Op != "and" && b.Op != "or") || len(f.s) <= lineWidth {
		return f.s, nil
	}
	var operands []string
	for _, o := range flatten(b, b.Spell) {
		of, err := tr(o)
		if err != nil {
			return "", err
		}
		operands = append(operands, wrap(of, opPrec(b.Op)))
	}
	return strings.Join(operands, "\n"+b.Spell+" "), nil
}

// flatten lists the operands of a chain of one spelling of and/or.
func flatten(n Node, spell string) []Node {
	if b, ok := n.(*Binary); ok && b.Spell == spell {
		return append(flatten(b.L, spell), flatten(b.R, spell)...)
	}
	return []Node{n}
}

func opPrec(op string) int {
	switch op {
	case "or":
		return precOr
	case "and":
		return precAnd
	}
	return precCmp
}

// maxOutput bounds a translation. Some translations repeat an operand
// (a ?: b, x?.size(), ordering guards), so nesting them could grow the output
// exponentially; a rule longer than Portal's limit could not be loaded anyway.
const maxOutput = 16384

func tr(n Node) (frag, error) {
	f, err := trNode(n)
	if err == nil && len(f.s) > maxOutput {
		return frag{}, errAt(n.Pos(), "the translation is longer than %d bytes, Portal's limit for a rule; simplify the expression", maxOutput)
	}
	return f, err
}

func trNode(n Node) (frag, error) {
	switch n := n.(type) {
	case *Literal:
		return literal(n), nil
	case *Ident:
		if !slices.Contains(Names, n.Name) {
			return frag{}, errAt(n.At, "unknown name %q: rules read only %s", n.Name, strings.Join(Names, ", "))
		}
		return primary(n.Name), nil
	case *Property:
		return property(n)
	case *Index:
		x, err := tr(n.X)
		if err != nil {
			return frag{}, err
		}
		i, err := tr(n.Index)
		if err != nil {
			return frag{}, err
		}
		return primary(wrap(x, precPrimary) + "[" + wrap(i, precOr) + "]"), nil
	case *List:
		elems, err := trAll(n.Elems)
		if err != nil {
			return frag{}, err
		}
		return primary("[" + strings.Join(elems, ", ") + "]"), nil
	case *Unary:
		return unary(n)
	case *Binary:
		return binary(n)
	case *Elvis:
		return elvis(n)
	case *Ternary:
		return ternary(n)
	case *Call:
		return call(n)
	}
	return frag{}, fmt.Errorf("internal error: unknown node %T", n)
}

func trAll(nodes []Node) ([]string, error) {
	out := make([]string, len(nodes))
	for i, e := range nodes {
		f, err := tr(e)
		if err != nil {
			return nil, err
		}
		out[i] = wrap(f, precOr)
	}
	return out, nil
}

func literal(n *Literal) frag {
	// Keywords and numbers sit just below primary: expr-lang reads neither
	// true.h nor 0.A, so a member of one prints as (true).h or (0).A.
	switch v := n.Value.(type) {
	case nil:
		return frag{s: "nil", prec: precPrimary - 1}
	case bool:
		return frag{s: strconv.FormatBool(v), prec: precPrimary - 1}
	case string:
		return primary(Quote(v))
	}
	if strings.HasPrefix(n.Text, "-") {
		return frag{s: n.Text, prec: precNeg}
	}
	return frag{s: n.Text, prec: precPrimary - 1}
}

// Quote writes s as an expr-lang string literal: double-quoted, or a raw
// `backtick` string when s holds backslashes (regular expressions) and can be
// written raw, so patterns stay readable.
func Quote(s string) string {
	if strings.Contains(s, `\`) && !strings.Contains(s, "`") && utf8.ValidString(s) &&
		strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return "`" + s + "`"
	}
	return strconv.Quote(s)
}

var plainName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func property(n *Property) (frag, error) {
	x, err := tr(n.X)
	if err != nil {
		return frag{}, err
	}
	xs := wrap(x, precPrimary)
	switch {
	case !plainName.MatchString(n.Name) && n.Safe:
		return primary(xs + "?.[" + Quote(n.Name) + "]"), nil
	case !plainName.MatchString(n.Name):
		return primary(xs + "[" + Quote(n.Name) + "]"), nil
	case n.Safe:
		return primary(xs + "?." + n.Name), nil
	}
	return primary(xs + "." + n.Name), nil
}

func unary(n *Unary) (frag, error) {
	x, err := tr(n.X)
	if err != nil {
		return frag{}, err
	}
	if x.neg != "" {
		return frag{s: x.neg, prec: precCmp, neg: x.s}, nil
	}
	if n.Spell == "not" {
		return frag{s: "not " + wrap(x, precNot), prec: precNot}, nil
	}
	return frag{s: "!" + wrap(x, precNot), prec: precNot}, nil
}

func binary(n *Binary) (frag, error) {
	l, err := tr(n.L)
	if err != nil {
		return frag{}, err
	}
	if n.Op == "matches" {
		return matches(n.At, l, n.R)
	}
	r, err := tr(n.R)
	if err != nil {
		return frag{}, err
	}
	p := opPrec(n.Op)
	if n.Op == "and" || n.Op == "or" {
		// Both are associative: a or (b or c) prints as a or b or c.
		return frag{s: wrap(l, p) + " " + n.Spell + " " + wrap(r, p), prec: p}, nil
	}
	switch n.Op {
	case "<", "<=", ">", ">=":
		return ordering(n, l, r), nil
	}
	return frag{s: wrap(l, p+1) + " " + n.Op + " " + wrap(r, p+1), prec: p}, nil
}

// ordering translates <, <=, > and >=. SpEL orders null below every value
// (null < 1 is true); expr-lang fails on a nil operand. Operands that may be
// null are therefore tested explicitly, which keeps the POC's verdicts:
// runAsUser < 1000 flags a container that does not set runAsUser. The guarded
// forms report precMixed so that any operator parent parenthesises them and
// the guard reads as one unit.
func ordering(n *Binary, l, r frag) frag {
	ls, rs := wrap(l, precCmp+1), wrap(r, precCmp+1)
	cmp := ls + " " + n.Op + " " + rs
	lNull, rNull := mayBeNull(n.L), mayBeNull(n.R)
	less := n.Op == "<" || n.Op == "<="
	switch {
	case !lNull && !rNull:
		return frag{s: cmp, prec: precCmp}
	case lNull && !rNull && less:
		return frag{s: ls + " == nil or " + cmp, prec: precMixed}
	case lNull && !rNull:
		return frag{s: ls + " != nil and " + cmp, prec: precMixed}
	case !lNull && less:
		return frag{s: rs + " != nil and " + cmp, prec: precMixed}
	case !lNull:
		return frag{s: rs + " == nil or " + cmp, prec: precMixed}
	}
	// Both may be null: the verdict when either is follows from null
	// sorting first.
	whenNull := map[string]string{
		"<":  ls + " == nil and " + rs + " != nil",
		"<=": ls + " == nil",
		">":  ls + " != nil and " + rs + " == nil",
		">=": rs + " == nil",
	}[n.Op]
	return frag{s: ls + " == nil or " + rs + " == nil ? " + whenNull + " : " + cmp, prec: precTernary}
}

// mayBeNull reports whether n can evaluate to null: literals, lists,
// operators and the non-null-safe methods cannot.
func mayBeNull(n Node) bool {
	switch n := n.(type) {
	case *Literal:
		return n.Value == nil
	case *List, *Unary, *Binary:
		return false
	case *Call:
		return n.Safe
	case *Elvis:
		return mayBeNull(n.R)
	case *Ternary:
		return mayBeNull(n.Then) || mayBeNull(n.Else)
	}
	return true
}

// infix builds a membership-style operation and its negated form.
func infix(l frag, op string, r frag) frag {
	ls, rs := wrap(l, precCmp+1), wrap(r, precCmp+1)
	return frag{s: ls + " " + op + " " + rs, prec: precCmp, neg: ls + " not " + op + " " + rs}
}

// matches translates a regular-expression match. SpEL (Java's
// String.matches) matches the whole string; expr-lang's matches finds the
// pattern anywhere, so the pattern is anchored. It must be a literal that Go's
// RE2 engine accepts.
func matches(at int, l frag, pattern Node) (frag, error) {
	var s string
	lit, ok := pattern.(*Literal)
	if ok {
		s, ok = lit.Value.(string)
	}
	if !ok {
		return frag{}, errAt(at, "matches needs a string literal pattern")
	}
	anchored := "^(?:" + s + ")$"
	if _, err := regexp.Compile(anchored); err != nil {
		return frag{}, errAt(pattern.Pos(), "pattern %q is not valid in Go's RE2 syntax (%v); Java-only constructs such as lookarounds and backreferences have no equivalent", s, err)
	}
	return infix(l, "matches", primary(Quote(anchored))), nil
}

// elvis translates a ?: b. SpEL falls back to b when a is null or an empty
// string. When a is known not to be a string, that is exactly a ?? b;
// otherwise the empty-string case is kept explicitly.
func elvis(n *Elvis) (frag, error) {
	l, err := tr(n.L)
	if err != nil {
		return frag{}, err
	}
	r, err := tr(n.R)
	if err != nil {
		return frag{}, err
	}
	switch kindOf(n.L) {
	case kNumber, kBool, kList, kMap, kNull:
		// ?? is associative, so a ?? (b ?? c) prints as a ?? b ?? c.
		rs := wrap(r, precCoalesce+1)
		if r.coalesce {
			rs = r.s
		}
		return frag{s: wrap(l, precCoalesce+1) + " ?? " + rs, prec: precMixed, coalesce: true}, nil
	}
	ls := wrap(l, precCoalesce+1)
	return frag{s: "(" + ls + ` ?? "") != "" ? ` + ls + " : " + wrap(r, precOr), prec: precTernary}, nil
}

func ternary(n *Ternary) (frag, error) {
	parts, err := trAll([]Node{n.Cond, n.Then, n.Else})
	if err != nil {
		return frag{}, err
	}
	return frag{s: parts[0] + " ? " + parts[1] + " : " + parts[2], prec: precTernary}, nil
}
