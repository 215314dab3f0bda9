package manifest

import (
	"bytes"
	"strconv"
)

// fastDecode reads the block-style YAML that generators write (kubectl get
// -o yaml, helm template, kustomize build, sigs.k8s.io/yaml.Marshal): nested
// block mappings and sequences of plain and simply quoted scalars. It is
// several times faster than the general YAML parser, which made decoding
// most of `portal eval`.
//
// It is a fast path, not a parser: it reports ok=false for anything it does
// not handle exactly as go.yaml.in/yaml/v2 (comments after values, anchors,
// tags, block and multi-line scalars, flow collections with content,
// escapes, non-ASCII text, numbers other than plain decimal integers,
// duplicate keys, malformed input) and decode then uses that parser, so a
// document reads the same either way (FuzzFastDecode holds it to that).
func fastDecode(data []byte) (map[string]any, bool) {
	p := fastParser{lines: make([]fastLine, 0, bytes.Count(data, []byte{'\n'})+1)}
	if !p.split(data) || len(p.lines) == 0 || isSeqItem(p.lines[0].text) {
		return nil, false
	}
	m, ok := p.mapping(p.lines[0].indent)
	if !ok || p.pos != len(p.lines) {
		return nil, false
	}
	return m, true
}

type fastLine struct {
	indent int
	text   []byte
}

type fastParser struct {
	lines []fastLine
	pos   int
	depth int
}

// maxFastDepth bounds the fast path's recursion; deeper documents, which no
// generator writes, go to the general parser.
const maxFastDepth = 100

// split cuts data into indented lines, dropping blank and comment-only lines.
func (p *fastParser) split(data []byte) bool {
	for len(data) > 0 {
		var l []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			l, data = data, nil
		}
		for _, c := range l {
			// Tabs, control characters and non-ASCII text have rules of
			// their own; the general parser applies them.
			if c < 0x20 || c >= 0x7f {
				return false
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
			return false
		}
		p.lines = append(p.lines, fastLine{indent: indent, text: l})
	}
	return true
}

func isSeqItem(t []byte) bool {
	return len(t) > 0 && t[0] == '-' && (len(t) == 1 || t[1] == ' ')
}

// node reads the block node starting at the current line.
func (p *fastParser) node(indent int) (any, bool) {
	if isSeqItem(p.lines[p.pos].text) {
		return p.seq(indent)
	}
	return p.mapping(indent)
}

func (p *fastParser) mapping(indent int) (map[string]any, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	m := map[string]any{}
	for p.pos < len(p.lines) {
		l := &p.lines[p.pos]
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
		p.pos++
		var v any
		switch {
		case len(rest) > 0:
			v, ok = inlineValue(rest)
		case p.pos == len(p.lines):
		case p.lines[p.pos].indent > indent:
			v, ok = p.node(p.lines[p.pos].indent)
		case p.lines[p.pos].indent == indent && isSeqItem(p.lines[p.pos].text):
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
	s := []any{}
	for p.pos < len(p.lines) {
		l := &p.lines[p.pos]
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
			p.pos++
			if p.pos < len(p.lines) && p.lines[p.pos].indent > indent {
				v, ok = p.node(p.lines[p.pos].indent)
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
				p.pos++
				v, ok = inlineValue(content)
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
	return string(t[1 : len(t)-1]), true
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
	if !flowPlain(t) {
		return nil, false
	}
	return resolvePlain(t)
}

// flowPlain reports whether t is made only of the bytes the fast path
// trusts inside a flow collection. Flow context ends plain scalars (and
// implicit keys) at more characters than block context does; words,
// numbers and paths are what manifests hold there.
func flowPlain[T string | []byte](t T) bool {
	for i := range len(t) {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '/' || c == ' ') {
			return false
		}
	}
	return true
}

func inlineValue(t []byte) (any, bool) {
	switch t[0] {
	case '"', '\'':
		return quoted(t)
	case '[':
		return flowSeq(t)
	case '{':
		return flowMap(t)
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
				return string(t), true
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
	return string(t), true
}

// flowItems cuts the inside of a one-level flow collection ("[a, b]",
// "{a: 1}") at its commas. Nested collections, quotes and empty entries are
// left to the general parser.
func flowItems(t []byte, closer byte) ([][]byte, bool) {
	if len(t) < 2 || t[len(t)-1] != closer {
		return nil, false
	}
	inner := bytes.TrimSpace(t[1 : len(t)-1])
	if len(inner) == 0 {
		return nil, true
	}
	if bytes.ContainsAny(inner, "[]{}\\") {
		return nil, false
	}
	items := bytes.Split(inner, []byte{','})
	for i, it := range items {
		it = bytes.Trim(it, " ")
		if len(it) == 0 || isSeqItem(it) {
			return nil, false
		}
		items[i] = it
	}
	return items, true
}

func flowSeq(t []byte) (any, bool) {
	items, ok := flowItems(t, ']')
	if !ok {
		return nil, false
	}
	s := make([]any, 0, len(items))
	for _, it := range items {
		v, ok := flowScalar(it)
		if !ok {
			return nil, false
		}
		s = append(s, v)
	}
	return s, true
}

func flowMap(t []byte) (any, bool) {
	items, ok := flowItems(t, '}')
	if !ok {
		return nil, false
	}
	m := make(map[string]any, len(items))
	for _, it := range items {
		k, rest, ok := splitKey(it)
		if !ok || len(rest) == 0 || !flowPlain(k) {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		v, ok := flowScalar(rest)
		if !ok {
			return nil, false
		}
		m[k] = v
	}
	return m, true
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
