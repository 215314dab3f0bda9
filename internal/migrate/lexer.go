package migrate

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ExprError is a problem with a SpEL expression: a syntax error or a
// construct the migrator does not translate. Pos is the byte offset of the
// construct in the expression.
type ExprError struct {
	Pos int
	Msg string
}

func (e *ExprError) Error() string { return fmt.Sprintf("column %d: %s", e.Pos+1, e.Msg) }

// Snippet shows the line of src that holds the error with a caret under it,
// in the style of expr-lang's compile errors.
func (e *ExprError) Snippet(src string) string {
	pos := min(max(e.Pos, 0), len(src))
	start := strings.LastIndexByte(src[:pos], '\n') + 1
	end := strings.IndexByte(src[pos:], '\n')
	if end < 0 {
		end = len(src)
	} else {
		end += pos
	}
	return " | " + src[start:end] + "\n | " + strings.Repeat(".", utf8.RuneCountInString(src[start:pos])) + "^"
}

func errAt(pos int, format string, args ...any) *ExprError {
	return &ExprError{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

type tokenKind int

const (
	tEOF tokenKind = iota
	tIdent
	tString
	tNumber
	tPunct  // ( ) [ ] { } , : ? ?. ?: .
	tOp     // == != < <= > >= ! && || and the arithmetic operators
	tRefuse // a construct the tokenizer already knows it cannot translate
)

type token struct {
	kind tokenKind
	text string // as written
	val  any    // decoded string or number
	pos  int
}

// maxExprLen bounds an expression: Portal's rule field has the same limit.
const maxExprLen = 16384

// lex splits a SpEL expression into tokens.
func lex(src string) ([]token, error) {
	if len(src) > maxExprLen {
		return nil, errAt(0, "expression is longer than %d bytes", maxExprLen)
	}
	if !utf8.ValidString(src) {
		return nil, errAt(0, "expression is not valid UTF-8")
	}
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case isIdentStart(c):
			j := i + 1
			for j < len(src) && isIdentPart(src[j]) {
				j++
			}
			toks = append(toks, token{kind: tIdent, text: src[i:j], pos: i})
			i = j
			continue
		case c >= '0' && c <= '9':
			t, err := lexNumber(src, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i += len(t.text)
			continue
		case c == '\'' || c == '"':
			t, n, err := lexString(src, i)
			if err != nil {
				return nil, err
			}
			toks = append(toks, t)
			i += n
			continue
		}
		t, err := lexSymbol(src, i)
		if err != nil {
			return nil, err
		}
		toks = append(toks, t)
		i += len(t.text)
	}
	return append(toks, token{kind: tEOF, pos: len(src)}), nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentPart(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lexNumber reads an integer or decimal literal. SpEL's long suffix (L) is
// dropped; hexadecimal and float/double suffixes are refused.
func lexNumber(src string, i int) (token, error) {
	j := i
	for j < len(src) && isDigit(src[j]) {
		j++
	}
	if j < len(src) && (src[j] == 'x' || src[j] == 'X') && j == i+1 && src[i] == '0' {
		return token{}, errAt(i, "hexadecimal literal: write the number in decimal")
	}
	isFloat := false
	if j+1 < len(src) && src[j] == '.' && isDigit(src[j+1]) {
		isFloat = true
		for j++; j < len(src) && isDigit(src[j]); j++ {
		}
	}
	if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
		k := j + 1
		if k < len(src) && (src[k] == '+' || src[k] == '-') {
			k++
		}
		if k < len(src) && isDigit(src[k]) {
			isFloat = true
			for j = k; j < len(src) && isDigit(src[j]); j++ {
			}
		}
	}
	text := src[i:j]
	suffix := 0
	if j < len(src) {
		switch src[j] {
		case 'L', 'l':
			if isFloat {
				return token{}, errAt(i, "number %s%c: a long suffix on a decimal", text, src[j])
			}
			suffix = 1
		case 'd', 'D', 'f', 'F':
			return token{}, errAt(i, "number %s%c: float/double suffixes are not supported; drop the suffix", text, src[j])
		}
	}
	if k := j + suffix; k < len(src) && isIdentPart(src[k]) {
		return token{}, errAt(i, "malformed number %q", src[i:k+1])
	}
	var val any
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return token{}, errAt(i, "number %s: %v", text, err)
		}
		val = f
	} else {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return token{}, errAt(i, "number %s does not fit in 64 bits", text)
		}
		val = n
	}
	return token{kind: tNumber, text: src[i : j+suffix], val: val, pos: i}, nil
}

// lexString reads a quoted string. SpEL has no backslash escapes: a quote
// inside the string is written twice.
func lexString(src string, i int) (token, int, error) {
	q := src[i]
	var b strings.Builder
	for j := i + 1; j < len(src); j++ {
		if src[j] != q {
			b.WriteByte(src[j])
			continue
		}
		if j+1 < len(src) && src[j+1] == q {
			b.WriteByte(q)
			j++
			continue
		}
		return token{kind: tString, text: src[i : j+1], val: b.String(), pos: i}, j + 1 - i, nil
	}
	return token{}, 0, errAt(i, "unterminated string literal")
}

// symbols in longest-first order.
var symbols = []struct {
	text string
	kind tokenKind
	msg  string // for tRefuse: why
}{
	{".?[", tRefuse, "collection selection (.?[...]) has no expr-lang translation; rewrite it with filter() by hand"},
	{".![", tRefuse, "collection projection (.![...]) has no expr-lang translation; rewrite it with map() by hand"},
	{".^[", tRefuse, "first-match selection (.^[...]) has no expr-lang translation; rewrite it with find() by hand"},
	{".$[", tRefuse, "last-match selection (.$[...]) has no expr-lang translation; rewrite it with findLast() by hand"},
	{"?.?[", tRefuse, "collection selection (?.?[...]) has no expr-lang translation; rewrite it with filter() by hand"},
	{"?.![", tRefuse, "collection projection (?.![...]) has no expr-lang translation; rewrite it with map() by hand"},
	{"?.[", tRefuse, "null-safe indexing (?.[...]) is not supported; index with [...] and guard with != null"},
	{"?.", tPunct, ""}, {"?:", tPunct, ""},
	{"==", tOp, ""}, {"!=", tOp, ""}, {"<=", tOp, ""}, {">=", tOp, ""}, {"&&", tOp, ""}, {"||", tOp, ""},
	{"++", tRefuse, "increment (++) has no expr-lang translation: rules cannot assign"},
	{"--", tRefuse, "decrement (--) has no expr-lang translation: rules cannot assign"},
	{"<", tOp, ""}, {">", tOp, ""}, {"!", tOp, ""},
	{"+", tOp, ""}, {"-", tOp, ""}, {"*", tOp, ""}, {"/", tOp, ""}, {"%", tOp, ""}, {"^", tOp, ""},
	{"=", tRefuse, "assignment (=) has no expr-lang translation: rules cannot assign (did you mean ==?)"},
	{"(", tPunct, ""}, {")", tPunct, ""}, {"[", tPunct, ""}, {"]", tPunct, ""},
	{"{", tPunct, ""}, {"}", tPunct, ""}, {",", tPunct, ""}, {":", tPunct, ""}, {"?", tPunct, ""}, {".", tPunct, ""},
}

func lexSymbol(src string, i int) (token, error) {
	for _, s := range symbols {
		if !strings.HasPrefix(src[i:], s.text) {
			continue
		}
		if s.kind == tRefuse {
			return token{}, errAt(i, "%s", s.msg)
		}
		return token{kind: s.kind, text: s.text, pos: i}, nil
	}
	switch src[i] {
	case '#':
		return token{}, errAt(i, "variable reference %s has no expr-lang translation: Portal rules read only the context names", word(src, i))
	case '@', '&':
		return token{}, errAt(i, "bean reference %s has no expr-lang translation", word(src, i))
	}
	r, _ := utf8.DecodeRuneInString(src[i:])
	return token{}, errAt(i, "unexpected character %q", r)
}

// word returns the sigil at src[i] and the identifier after it, for messages.
func word(src string, i int) string {
	j := i + 1
	for j < len(src) && isIdentPart(src[j]) {
		j++
	}
	return src[i:j]
}
