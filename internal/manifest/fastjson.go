package manifest

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/vilaca/portal/internal/reuse"
)

// fastJSON reads a JSON object into the map shape of
// k8s.io/apimachinery/pkg/util/json.Unmarshal (int64 for numbers without a
// fraction that fit, float64 for the others) without reflection, which
// made a JSON input slower than block YAML.
//
// It is a fast path, not a parser: it reports ok=false for anything it does
// not read exactly as that decoder (malformed input, invalid UTF-8, lone
// surrogates, numbers out of range, nesting past maxFastDepth) and decode
// then uses the decoder, so a document reads the same either way
// (FuzzFastJSON holds it to that).
func fastJSON(data []byte, r *reuse.Pool) (map[string]any, bool) {
	p := jsonParser{data: data, pool: r}
	p.space()
	if p.pos >= len(p.data) || p.data[p.pos] != '{' {
		return nil, false
	}
	m, ok := p.object()
	if !ok {
		return nil, false
	}
	p.space()
	return m, p.pos == len(p.data)
}

type jsonParser struct {
	data  []byte
	pos   int
	depth int
	pool  *reuse.Pool
}

func (p *jsonParser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// next skips white space and reports whether c is next, consuming it.
func (p *jsonParser) next(c byte) bool {
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *jsonParser) value() (any, bool) {
	p.space()
	if p.pos >= len(p.data) {
		return nil, false
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.string()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	default:
		return p.number()
	}
}

func (p *jsonParser) literal(lit string) bool {
	if len(p.data)-p.pos < len(lit) || string(p.data[p.pos:p.pos+len(lit)]) != lit {
		return false
	}
	p.pos += len(lit)
	return true
}

func (p *jsonParser) object() (map[string]any, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	p.pos++ // '{'
	m := p.pool.Map(0)
	if p.next('}') {
		return m, true
	}
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, false
		}
		k, ok := p.string()
		if !ok || !p.next(':') {
			return nil, false
		}
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		// The last of duplicate keys wins, as in encoding/json.
		m[k.(string)] = v
		if p.next('}') {
			return m, true
		}
		if !p.next(',') {
			return nil, false
		}
	}
}

func (p *jsonParser) array() ([]any, bool) {
	if p.depth++; p.depth > maxFastDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	p.pos++ // '['
	s := p.pool.List()
	if p.next(']') {
		return s, true
	}
	for {
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		s = append(s, v)
		if p.next(']') {
			return s, true
		}
		if !p.next(',') {
			return nil, false
		}
	}
}

// string reads a string; p.pos is at its opening quote.
func (p *jsonParser) string() (any, bool) {
	start := p.pos + 1
	for i := start; i < len(p.data); i++ {
		switch c := p.data[i]; {
		case c == '"':
			p.pos = i + 1
			return internValue(p.data[start:i]), true
		case c == '\\':
			return p.escaped(start)
		case c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			// Invalid UTF-8 becomes U+FFFD in encoding/json: the decoder
			// does that.
			r, size := utf8.DecodeRune(p.data[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false
			}
			i += size - 1
		}
	}
	return nil, false
}

// escaped reads a string with escapes, from its first byte at start.
func (p *jsonParser) escaped(start int) (any, bool) {
	out := make([]byte, 0, 64)
	for i := start; i < len(p.data); i++ {
		c := p.data[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return string(out), true
		case c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(p.data[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false
			}
			out = append(out, p.data[i:i+size]...)
			i += size - 1
		case c != '\\':
			out = append(out, c)
		case i+1 >= len(p.data):
			return nil, false
		default:
			i++
			switch e := p.data[i]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, n, ok := p.unicode(i + 1)
				if !ok {
					return nil, false
				}
				out = utf8.AppendRune(out, r)
				i += n
			default:
				return nil, false
			}
		}
	}
	return nil, false
}

// unicode reads the 4 hex digits at i (and a low surrogate's escape after
// a high one), returning the rune and the bytes read. A lone surrogate is
// left to the decoder.
func (p *jsonParser) unicode(i int) (rune, int, bool) {
	r, ok := hex4(p.data, i)
	if !ok {
		return 0, 0, false
	}
	if !utf16.IsSurrogate(r) {
		return r, 4, true
	}
	if i+10 > len(p.data) || p.data[i+4] != '\\' || p.data[i+5] != 'u' {
		return 0, 0, false
	}
	lo, ok := hex4(p.data, i+6)
	if !ok {
		return 0, 0, false
	}
	dec := utf16.DecodeRune(r, lo)
	if dec == utf8.RuneError {
		return 0, 0, false
	}
	return dec, 10, true
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 32)
	return rune(n), err == nil
}

// number reads a JSON number as int64 when it has no fraction and fits,
// else as float64, as PreserveInts does.
func (p *jsonParser) number() (any, bool) {
	start, i := p.pos, p.pos
	digits := func() int {
		n := 0
		for i < len(p.data) && p.data[i] >= '0' && p.data[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(p.data) && p.data[i] == '-' {
		i++
	}
	intStart := i
	if n := digits(); n == 0 || (n > 1 && p.data[intStart] == '0') {
		return nil, false
	}
	isInt := true
	if i < len(p.data) && p.data[i] == '.' {
		i++
		isInt = false
		if digits() == 0 {
			return nil, false
		}
	}
	if i < len(p.data) && (p.data[i] == 'e' || p.data[i] == 'E') {
		i++
		if i < len(p.data) && (p.data[i] == '+' || p.data[i] == '-') {
			i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	p.pos = i
	s := string(p.data[start:i])
	if isInt {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, true
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}
