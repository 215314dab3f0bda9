package manifest

import (
	"bytes"
	"strconv"

	"github.com/vilaca/portal/internal/reuse"
)

// fastDecode reads the block-style YAML that generators write (kubectl get
// -o yaml, helm template, kustomize build, sigs.k8s.io/yaml.Marshal): nested
// block mappings and sequences of plain and simply quoted scalars, and
// one-line flow collections, nested, as flow-style emitters write. It is
// several times faster than the general YAML parser, which made decoding
// most of `portal eval`.
//
// It is a fast path, not a parser: it reports ok=false for anything it does
// not handle exactly as go.yaml.in/yaml/v2 (comments after values, anchors,
// tags, block and multi-line scalars, flow collections across lines,
// escapes, non-ASCII text, numbers other than plain decimal integers,
// duplicate keys, malformed input) and decode then uses that parser, so a
// document reads the same either way (FuzzFastDecode holds it to that).
func fastDecode(data []byte, r *reuse.Pool) (map[string]any, bool) {
	p := fastParser{rest: data, pool: r}
	p.advance()
	if !p.more || isSeqItem(p.line.text) {
		return nil, false
	}
	m, ok := p.mapping(p.line.indent)
	if !ok || p.more || p.bad {
		return nil, false
	}
	return m, true
}

type fastLine struct {
	indent int
	text   []byte
}

// fastParser reads the document a line at a time: line is the current one
// (when more), rest what follows it. Lines are cut as the parser reaches
// them, not all first: a slice of every line cost as much as the strings.
type fastParser struct {
	rest  []byte
	line  fastLine
	more  bool // line holds a line
	bad   bool // a line the fast path does not take: the parse fails
	depth int
	pool  *reuse.Pool
}

// maxFastDepth bounds the fast path's recursion; deeper documents, which no
// generator writes, go to the general parser.
const maxFastDepth = 100

// advance moves to the next line that is not blank or a comment. A line the
// fast path does not take ends the lines and sets bad.
func (p *fastParser) advance() {
	for len(p.rest) > 0 {
		var l []byte
		if i := bytes.IndexByte(p.rest, '\n'); i >= 0 {
			l, p.rest = p.rest[:i], p.rest[i+1:]
		} else {
			l, p.rest = p.rest, nil
		}
		for _, c := range l {
			// Tabs, control characters and non-ASCII text have rules of
			// their own; the general parser applies them.
			if c < 0x20 || c >= 0x7f {
				p.fail()
				return
			}
		}
		indent := 0
		for indent < len(l) && l[indent] == ' ' {
			indent++
		}
		l = bytes.TrimRight(l[indent:], " ")
		if len(l) == 0 || l[0] == '#' {
			continue
		}
		if bytes.Contains(l, []byte(" #")) || (indent == 0 && (bytes.HasPrefix(l, []byte("---")) || bytes.HasPrefix(l, []byte("...")))) {
			p.fail()
			return
		}
		p.line, p.more = fastLine{indent: indent, text: l}, true
		return
	}
	p.more = false
}

func (p *fastParser) fail() {
	p.bad, p.more, p.rest = true, false, nil
}

func isSeqItem(t []byte) bool {
	return len(t) > 0 && t[0] == '-' && (len(t) == 1 || t[1] == ' ')
}

// node reads the block node starting at the current line.
func (p *fastParser) node(indent int) (any, bool) {
	if isSeqItem(p.line.text) {
		return p.seq(indent)
	}
	return p.mapping(indent)
}

func (p *fastParser) mapping(indent int) (map[string]any, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	m := p.pool.Map(0)
	for p.more {
		l := &p.line
		if l.indent < indent {
			break
		}
		if l.indent > indent || isSeqItem(l.text) {
			return nil, false
		}
		key, rest, ok := splitKey(l.text)
		if !ok {
			return nil, false
		}
		if _, dup := m[key]; dup {
			return nil, false
		}
		p.advance()
		var v any
		switch {
		case len(rest) > 0:
			v, ok = inlineValue(rest, p.pool)
		case !p.more:
		case p.line.indent > indent:
			v, ok = p.node(p.line.indent)
		case p.line.indent == indent && isSeqItem(p.line.text):
			v, ok = p.seq(indent)
		}
		if !ok {
			return nil, false
		}
		m[key] = v
	}
	return m, true
}

func (p *fastParser) seq(indent int) ([]any, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	s := p.pool.List()
	for p.more {
		l := &p.line
		if l.indent < indent {
			break
		}
		if l.indent > indent {
			return nil, false
		}
		if !isSeqItem(l.text) {
			break
		}
		var (
			v  any
			ok = true
		)
		content := bytes.TrimLeft(l.text[1:], " ")
		switch {
		case len(content) == 0:
			p.advance()
			if p.more && p.line.indent > indent {
				v, ok = p.node(p.line.indent)
			}
		case isSeqItem(content):
			return nil, false
		default:
			if _, _, isKey := splitKey(content); isKey {
				// "- key: value" opens a mapping at the column of key.
				l.indent += len(l.text) - len(content)
				l.text = content
				v, ok = p.mapping(l.indent)
			} else {
				p.advance()
				v, ok = inlineValue(content, p.pool)
			}
		}
		if !ok {
			return nil, false
		}
		s = append(s, v)
	}
	return s, true
}

// splitKey cuts "key: rest" or "key:". Keys must be plain strings as the
// general parser would resolve them.
func splitKey(t []byte) (string, []byte, bool) {
	var k, rest []byte
	if i := bytes.Index(t, []byte(": ")); i >= 0 {
		k, rest = t[:i], bytes.TrimLeft(t[i+2:], " ")
	} else if len(t) > 0 && t[len(t)-1] == ':' {
		k = t[:len(t)-1]
	} else {
		return "", nil, false
	}
	// The YAML parser limits implicit keys to 1024 bytes.
	if len(k) == 0 || len(k) > 1000 || k[len(k)-1] == ' ' || indicator(k[0]) || k[0] == '-' || string(k) == "<<" {
		return "", nil, false
	}
	v, ok := resolvePlain(k)
	s, isString := v.(string)
	return s, rest, ok && isString
}

// indicator reports whether c may not start a plain scalar (or needs more
// care than the fast path takes).
func indicator(c byte) bool {
	switch c {
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`':
		return true
	}
	return false
}

// quoted reads a one-line quoted scalar without escapes or inner quotes.
func quoted(t []byte) (any, bool) {
	q := t[0]
	if len(t) < 2 || t[len(t)-1] != q || bytes.ContainsAny(t[1:len(t)-1], "\"'\\") {
		return nil, false
	}
	return internValue(t[1 : len(t)-1]), true
}

// flowScalar reads an entry of a flow collection.
func flowScalar(t []byte) (any, bool) {
	if t[0] == '"' || t[0] == '\'' {
		return quoted(t)
	}
	// "- x" is a block sequence entry, never a plain scalar, even in flow.
	if indicator(t[0]) || isSeqItem(t) {
		return nil, false
	}
	// A colon inside a value ("ghcr.io/app:1.2") is part of it: the flow
	// parser ended the scalar at one followed by a space.
	if !flowPlain(t, ':') {
		return nil, false
	}
	return resolvePlain(t)
}

// flowPlain reports whether t is made only of the bytes the fast path
// trusts inside a flow collection. Flow context ends plain scalars (and
// implicit keys) at more characters than block context does; words,
// numbers and paths are what manifests hold there.
// extra is one more byte to trust, or 0.
func flowPlain[T string | []byte](t T, extra byte) bool {
	for i := range len(t) {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '/' || c == ' ' || (c == extra && c != 0)) {
			return false
		}
	}
	return true
}

func inlineValue(t []byte, pool *reuse.Pool) (any, bool) {
	switch t[0] {
	case '"', '\'':
		return quoted(t)
	case '[', '{':
		return flowValue(t, pool)
	}
	if indicator(t[0]) || isSeqItem(t) || bytes.Contains(t, []byte(": ")) || t[len(t)-1] == ':' {
		return nil, false
	}
	return resolvePlain(t)
}

// resolvePlain gives a plain scalar the type YAML 1.1 gives it, as
// go.yaml.in/yaml/v2 does, for the cases the fast path handles: strings,
// booleans, nulls and decimal integers.
func resolvePlain(t []byte) (any, bool) {
	switch c := t[0]; {
	case c == '+' || c == '.' || bytes.HasPrefix(t, []byte("-.")):
		// Floats and the infinities ("-.inf").
		return nil, false
	case c == '-' || (c >= '0' && c <= '9'):
		if n, ok := decimal(t); ok {
			return n, true
		}
		// A byte no integer, float or timestamp has ("50m", "64Mi",
		// "3/4") makes it a string; anything else is left to the parser.
		for _, b := range t {
			if bytes.IndexByte([]byte(numberBytes), b) < 0 {
				return internValue(t), true
			}
		}
		return nil, false
	case bytes.IndexByte([]byte("yYnNtTfFoO~"), c) >= 0:
		switch string(t) {
		case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
			return true, true
		case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
			return false, true
		case "~", "null", "Null", "NULL":
			return nil, true
		}
	}
	return internValue(t), true
}

// flowValue reads a one-line flow collection ("[a, b]", "{a: 1, b: [c]}",
// nested to any depth up to maxFastDepth) that takes the whole of t.
// Entries are plain or simply quoted scalars and collections; empty
// entries, trailing commas, single-pair mappings in sequences, complex
// keys and duplicate keys are left to the general parser.
func flowValue(t []byte, pool *reuse.Pool) (any, bool) {
	p := flowParser{t: t, pool: pool}
	v, ok := p.node()
	p.space()
	return v, ok && p.pos == len(t)
}

type flowParser struct {
	t     []byte
	pos   int
	depth int
	pool  *reuse.Pool
}

func (p *flowParser) space() {
	for p.pos < len(p.t) && p.t[p.pos] == ' ' {
		p.pos++
	}
}

func (p *flowParser) node() (any, bool) {
	p.space()
	if p.pos >= len(p.t) {
		return nil, false
	}
	switch p.t[p.pos] {
	case '[':
		return p.collection(']')
	case '{':
		return p.collection('}')
	}
	t, ok := p.scalar()
	if !ok {
		return nil, false
	}
	return flowScalar(t)
}

// scalar cuts the scalar at p.pos: a quoted one up to its closing quote, a
// plain one up to the next flow indicator or ": ".
func (p *flowParser) scalar() ([]byte, bool) {
	start := p.pos
	if q := p.t[start]; q == '"' || q == '\'' {
		end := bytes.IndexByte(p.t[start+1:], q)
		if end < 0 {
			return nil, false
		}
		p.pos = start + end + 2
		return p.t[start:p.pos], true
	}
	for p.pos < len(p.t) {
		c := p.t[p.pos]
		if c == ',' || c == '[' || c == ']' || c == '{' || c == '}' || c == '?' ||
			(c == ':' && (p.pos+1 == len(p.t) || p.t[p.pos+1] == ' ')) {
			break
		}
		p.pos++
	}
	t := bytes.TrimRight(p.t[start:p.pos], " ")
	// A colon at the end ("[a:]") belongs to the scalar for the parser;
	// too rare to follow it.
	return t, len(t) > 0 && t[len(t)-1] != ':'
}

// collection reads a flow sequence or mapping, closed by closer.
func (p *flowParser) collection(closer byte) (any, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	p.pos++
	var (
		s []any
		m map[string]any
	)
	if closer == '}' {
		m = p.pool.Map(0)
	} else {
		s = p.pool.List()
	}
	p.space()
	if p.pos < len(p.t) && p.t[p.pos] == closer {
		p.pos++
		if m != nil {
			return m, true
		}
		return s, true
	}
	for {
		if m != nil {
			if !p.entry(m) {
				return nil, false
			}
		} else {
			v, ok := p.node()
			if !ok {
				return nil, false
			}
			s = append(s, v)
		}
		p.space()
		if p.pos >= len(p.t) {
			return nil, false
		}
		switch p.t[p.pos] {
		case closer:
			p.pos++
			if m != nil {
				return m, true
			}
			return s, true
		case ',':
			p.pos++
		default:
			return nil, false
		}
	}
}

// entry reads a "key: value" pair of a flow mapping into m.
func (p *flowParser) entry(m map[string]any) bool {
	p.space()
	if p.pos >= len(p.t) {
		return false
	}
	k, ok := p.scalar()
	if !ok || k[0] == '"' || k[0] == '\'' || !flowPlain(k, 0) {
		return false
	}
	key, isStr := flowScalar(k)
	ks, _ := key.(string)
	if !isStr || ks != string(k) {
		return false
	}
	if _, dup := m[ks]; dup {
		return false
	}
	if p.pos+1 >= len(p.t) || p.t[p.pos] != ':' || p.t[p.pos+1] != ' ' {
		return false
	}
	p.pos += 2
	v, ok := p.node()
	if !ok {
		return false
	}
	m[ks] = v
	return true
}

// numberBytes are the bytes YAML 1.1 integers (decimal, octal, hex, binary,
// with underscores), floats and timestamps are written with.
const numberBytes = "0123456789abcdefABCDEFxXoOtTzZ_.+-: "

// decimal reads a plain decimal integer that fits int64 without doubt.
func decimal(t []byte) (int64, bool) {
	digits := t
	if t[0] == '-' {
		digits = t[1:]
	}
	if len(digits) == 0 || len(digits) > 18 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	for _, d := range digits {
		if d < '0' || d > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(t), 10, 64)
	return n, err == nil
}
