package migrate

import (
	"strings"
)

// maxDepth bounds nesting so a hostile expression cannot exhaust the stack.
const maxDepth = 100

// Parse reads the SpEL subset the POC rules use into an AST. Constructs
// outside the subset (type references, variables, assignment, arithmetic,
// selection and projection, ...) are errors that name the construct.
func Parse(src string) (Node, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	if p.peek().kind == tEOF {
		return nil, errAt(0, "expression is empty")
	}
	n, err := p.expression()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, errAt(t.pos, "unexpected %s after the end of the expression", describe(t))
	}
	return n, nil
}

type parser struct {
	toks  []token
	i     int
	depth int
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// is reports whether the next token is the punctuation or operator s.
func (p *parser) is(s string) bool {
	t := p.peek()
	return (t.kind == tPunct || t.kind == tOp) && t.text == s
}

// isWord reports whether the next token is the keyword w, in any case, as
// SpEL's textual operators are case-insensitive.
func (p *parser) isWord(w string) bool {
	t := p.peek()
	return t.kind == tIdent && strings.EqualFold(t.text, w)
}

func (p *parser) expect(s string) error {
	if !p.is(s) {
		t := p.peek()
		return errAt(t.pos, "expected %q, found %s", s, describe(t))
	}
	p.next()
	return nil
}

func describe(t token) string {
	switch t.kind {
	case tEOF:
		return "the end of the expression"
	case tString:
		return "string " + t.text
	}
	return "'" + t.text + "'"
}

func (p *parser) enter(pos int) error {
	p.depth++
	if p.depth > maxDepth {
		return errAt(pos, "expression nests more than %d levels deep", maxDepth)
	}
	return nil
}

// expression := or ( "?:" expression | "?" expression ":" expression )?
func (p *parser) expression() (Node, error) {
	if err := p.enter(p.peek().pos); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	n, err := p.or()
	if err != nil {
		return nil, err
	}
	switch {
	case p.is("?:"):
		at := p.next().pos
		r, err := p.expression()
		if err != nil {
			return nil, err
		}
		return &Elvis{At: at, L: n, R: r}, nil
	case p.is("?"):
		at := p.next().pos
		then, err := p.expression()
		if err != nil {
			return nil, err
		}
		if err := p.expect(":"); err != nil {
			return nil, err
		}
		els, err := p.expression()
		if err != nil {
			return nil, err
		}
		return &Ternary{At: at, Cond: n, Then: then, Else: els}, nil
	}
	return n, nil
}

func (p *parser) or() (Node, error) {
	return p.chain(p.and, "or", "||")
}

func (p *parser) and() (Node, error) {
	return p.chain(p.relational, "and", "&&")
}

// chain parses operand (op operand)*, left-associative.
func (p *parser) chain(operand func() (Node, error), word, sym string) (Node, error) {
	n, err := operand()
	if err != nil {
		return nil, err
	}
	for p.isWord(word) || p.is(sym) {
		t := p.next()
		r, err := operand()
		if err != nil {
			return nil, err
		}
		spell := strings.ToLower(t.text)
		n = &Binary{At: t.pos, Op: word, Spell: spell, L: n, R: r}
	}
	return n, nil
}

// relationalOps maps SpEL's relational operators, symbolic and textual, to
// the operator the AST records.
var relationalOps = map[string]string{
	"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">=",
	"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
	"matches": "matches",
}

// relational := operand (relop operand)?  SpEL allows one relational
// operator per level: a == b == c is a syntax error there too.
func (p *parser) relational() (Node, error) {
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	op, ok := relationalOp(t)
	if !ok {
		return l, nil
	}
	p.next()
	r, err := p.operand()
	if err != nil {
		return nil, err
	}
	return &Binary{At: t.pos, Op: op, Spell: op, L: l, R: r}, nil
}

func relationalOp(t token) (string, bool) {
	switch t.kind {
	case tOp:
		op, ok := relationalOps[t.text]
		return op, ok
	case tIdent:
		op, ok := relationalOps[strings.ToLower(t.text)]
		return op, ok
	}
	return "", false
}

// operand is a unary expression that must not be followed by an operator the
// migrator refuses (arithmetic, instanceof, between).
func (p *parser) operand() (Node, error) {
	n, err := p.unary()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	switch {
	case t.kind == tOp && strings.Contains("+-*/%^", t.text):
		return nil, errAt(t.pos, "arithmetic (%s) is not supported by the migrator; rewrite the rule by hand", t.text)
	case p.isWord("div") || p.isWord("mod"):
		return nil, errAt(t.pos, "arithmetic (%s) is not supported by the migrator; rewrite the rule by hand", t.text)
	case p.isWord("instanceof"):
		return nil, errAt(t.pos, "instanceof has no expr-lang translation: it names Java types")
	case p.isWord("between"):
		return nil, errAt(t.pos, "between is not supported; write it as two comparisons")
	}
	return n, nil
}

// unary := ("!" | "not") unary | "-" number | primary
func (p *parser) unary() (Node, error) {
	t := p.peek()
	switch {
	case p.is("!") || p.isWord("not"):
		if err := p.enter(t.pos); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		p.next()
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return &Unary{At: t.pos, Spell: strings.ToLower(t.text), X: x}, nil
	case p.is("-"):
		p.next()
		n := p.peek()
		if n.kind != tNumber {
			return nil, errAt(t.pos, "unary minus is only supported on number literals")
		}
		p.next()
		return negate(t.pos, n), nil
	case p.is("+"):
		return nil, errAt(t.pos, "unary plus is not supported")
	}
	return p.primary()
}

func negate(at int, n token) Node {
	switch v := n.val.(type) {
	case int64:
		return &Literal{At: at, Value: -v, Text: "-" + strings.TrimRight(n.text, "Ll")}
	default:
		return &Literal{At: at, Value: -v.(float64), Text: "-" + n.text}
	}
}

// primary := start ( "." member | "?." member | "[" expression "]" )*
func (p *parser) primary() (Node, error) {
	n, err := p.start()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		switch {
		case p.is(".") || p.is("?."):
			p.next()
			if n, err = p.member(n, t.text == "?."); err != nil {
				return nil, err
			}
		case p.is("["):
			p.next()
			idx, err := p.expression()
			if err != nil {
				return nil, err
			}
			if err := p.expect("]"); err != nil {
				return nil, err
			}
			n = &Index{At: t.pos, X: n, Index: idx}
		default:
			return n, nil
		}
	}
}

// member parses the property or method after a dot.
func (p *parser) member(x Node, safe bool) (Node, error) {
	t := p.next()
	if t.kind != tIdent {
		return nil, errAt(t.pos, "expected a property or method name after the dot, found %s", describe(t))
	}
	if !p.is("(") {
		return &Property{At: t.pos, X: x, Name: t.text, Safe: safe}, nil
	}
	args, err := p.args()
	if err != nil {
		return nil, err
	}
	return &Call{At: t.pos, X: x, Method: t.text, Args: args, Safe: safe}, nil
}

// args parses "(" [expression ("," expression)*] ")".
func (p *parser) args() ([]Node, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var args []Node
	for !p.is(")") {
		if len(args) > 0 {
			if err := p.expect(","); err != nil {
				return nil, err
			}
		}
		a, err := p.expression()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	p.next()
	return args, nil
}

// start parses the node a primary expression begins with.
func (p *parser) start() (Node, error) {
	t := p.peek()
	switch {
	case t.kind == tString || t.kind == tNumber:
		p.next()
		text := strings.TrimRight(t.text, "Ll")
		return &Literal{At: t.pos, Value: t.val, Text: text}, nil
	case p.is("("):
		p.next()
		n, err := p.expression()
		if err != nil {
			return nil, err
		}
		return n, p.expect(")")
	case p.is("{"):
		return p.list()
	case t.kind == tIdent:
		return p.name()
	}
	return nil, errAt(t.pos, "unexpected %s", describe(t))
}

// keywords cannot start an operand.
var keywords = []string{"and", "or", "eq", "ne", "lt", "le", "gt", "ge", "matches", "instanceof", "between", "div", "mod"}

func (p *parser) name() (Node, error) {
	t := p.next()
	lower := strings.ToLower(t.text)
	switch {
	case lower == "true" || lower == "false":
		return &Literal{At: t.pos, Value: lower == "true", Text: lower}, nil
	case lower == "null":
		return &Literal{At: t.pos, Value: nil, Text: "null"}, nil
	case t.text == "T" && p.is("("):
		return nil, errAt(t.pos, "type reference %s has no expr-lang translation: Portal rules cannot reach Java types", p.snippet(t.pos))
	case lower == "new":
		return nil, errAt(t.pos, "constructor call (new ...) has no expr-lang translation")
	case p.is("("):
		return nil, errAt(t.pos, "function call %s(...) on the root context has no expr-lang translation", t.text)
	}
	for _, k := range keywords {
		if lower == k {
			return nil, errAt(t.pos, "unexpected operator %q where a value was expected", t.text)
		}
	}
	return &Ident{At: t.pos, Name: t.text}, nil
}

// snippet returns the source of a call starting at token pos, up to its
// closing parenthesis, for error messages.
func (p *parser) snippet(pos int) string {
	var b strings.Builder
	depth := 0
	for _, t := range p.toks {
		if t.pos < pos || t.kind == tEOF {
			continue
		}
		b.WriteString(t.text)
		switch t.text {
		case "(":
			depth++
		case ")":
			depth--
			if depth == 0 {
				return b.String()
			}
		}
	}
	return b.String()
}

// list := "{" [expression ("," expression)*] "}"
func (p *parser) list() (Node, error) {
	at := p.next().pos
	l := &List{At: at}
	for !p.is("}") {
		if len(l.Elems) > 0 {
			if err := p.expect(","); err != nil {
				return nil, err
			}
		}
		e, err := p.expression()
		if err != nil {
			return nil, err
		}
		if p.is(":") {
			return nil, errAt(at, "inline map {key: value} is not supported; only inline lists {a, b} are")
		}
		l.Elems = append(l.Elems, e)
	}
	p.next()
	return l, nil
}
