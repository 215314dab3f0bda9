package eval

import (
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/vilaca/portal/internal/core"
)

// The JSON report is written by hand rather than through encoding/json: its
// shape is fixed, and reflection was a fifth of `portal eval -o json`. The
// bytes are exactly what json.Encoder with SetIndent("", "  ") writes for a
// Report (TestJSONMatchesEncodingJSON and FuzzJSONString hold it to that).

// appendResultElem appends r as an element of the "results" array, led by a
// comma that writeJSON drops from the first element.
func appendResultElem(b []byte, r *Result) []byte {
	b = appendResourcePart(b, &r.Resource)
	b = appendRulePart(b, r)
	return appendOutcomePart(b, r)
}

// An element is three parts: the resource (the same for every result of an
// object), the rule's fields (the same for every result of a rule) and
// the outcome; elemCache keeps the first two encoded.

// appendResourcePart appends the element's opening, its resource and the
// "rule" key.
func appendResourcePart(b []byte, res *Resource) []byte {
	b = append(b, ",\n    {\n      \"resource\": {\n        \"apiVersion\": "...)
	b = appendJSONString(b, res.APIVersion)
	b = append(b, ",\n        \"kind\": "...)
	b = appendJSONString(b, res.Kind)
	b = append(b, ",\n        \"namespace\": "...)
	b = appendJSONString(b, res.Namespace)
	b = append(b, ",\n        \"name\": "...)
	b = appendJSONString(b, res.Name)
	return append(b, "\n      },\n      \"rule\": "...)
}

// appendRulePart appends the rule's name, severity, category and
// enforcement action.
func appendRulePart(b []byte, r *Result) []byte {
	b = appendJSONString(b, r.Rule)
	b = append(b, ",\n      \"severity\": "...)
	b = appendJSONString(b, r.Severity)
	if r.Category != "" {
		b = append(b, ",\n      \"category\": "...)
		b = appendJSONString(b, r.Category)
	}
	b = append(b, ",\n      \"enforcementAction\": "...)
	return appendJSONString(b, r.EnforcementAction)
}

// appendOutcomePart appends the result and what goes with it, and closes
// the element.
func appendOutcomePart(b []byte, r *Result) []byte {
	b = append(b, ",\n      \"result\": "...)
	b = appendJSONString(b, r.Result)
	if r.Container != "" {
		b = append(b, ",\n      \"container\": "...)
		b = appendJSONString(b, r.Container)
	}
	if r.Message != "" {
		b = append(b, ",\n      \"message\": "...)
		b = appendJSONString(b, r.Message)
	}
	if r.Exception != "" {
		b = append(b, ",\n      \"exception\": "...)
		b = appendJSONString(b, r.Exception)
	}
	return append(b, "\n    }"...)
}

// elemCache is appendResultElem for a worker, which encodes every rule's
// result for one object after another: the resource part is encoded once
// an object and the rule part once a rule (about 19 results a pod for the
// pod-security bundle; escaping their strings again was 5.6% of a one-job
// run's CPU, appendJSONString in --profile cpu). It holds one resource and
// one entry a rule. A nil *elemCache encodes without.
type elemCache struct {
	res     Resource
	resJSON []byte
	rules   map[*core.Rule]rulePart
}

// rulePart is a rule's part and the fields it was encoded from, checked
// against each result's: the part stays right whatever fills them.
type rulePart struct {
	name, severity, category, action string
	json                             []byte
}

// append appends r, a result of rule, as appendResultElem does.
func (c *elemCache) append(b []byte, r *Result, rule *core.Rule) []byte {
	if c == nil {
		return appendResultElem(b, r)
	}
	if c.resJSON == nil || r.Resource != c.res {
		c.res, c.resJSON = r.Resource, appendResourcePart(c.resJSON[:0], &r.Resource)
	}
	b = append(b, c.resJSON...)
	part, ok := c.rules[rule]
	if !ok || part.name != r.Rule || part.severity != r.Severity || part.category != r.Category || part.action != r.EnforcementAction {
		if c.rules == nil {
			c.rules = map[*core.Rule]rulePart{}
		}
		part = rulePart{name: r.Rule, severity: r.Severity, category: r.Category, action: r.EnforcementAction, json: appendRulePart(nil, r)}
		c.rules[rule] = part
	}
	b = append(b, part.json...)
	return appendOutcomePart(b, r)
}

// writeJSON writes the report; the results are the chunks appendResultElem
// encoded during the run, or encoded now from Results.
func (r *Report) writeJSON(w io.Writer) error {
	if r.spill != nil && r.spill.into != nil {
		return r.spill.finish(w, appendSummary([]byte(jsonHead+"]"), r.Summary), appendSummary([]byte("\n  ]"), r.Summary))
	}
	if r.spill != nil {
		return r.writeSpilledJSON(w)
	}
	chunks := r.encoded
	if !r.isJSON {
		var elems []byte
		for i := range r.Results {
			elems = appendResultElem(elems, &r.Results[i])
		}
		chunks = [][]byte{elems}
	}
	empty := true
	for _, c := range chunks {
		empty = empty && len(c) == 0
	}
	buf := []byte(jsonHead)
	if empty {
		buf = append(buf, ']')
	}
	first := true
	for _, c := range chunks {
		if len(c) == 0 {
			continue
		}
		if first {
			c = c[1:] // the first element's comma
			first = false
		}
		// Small chunks are gathered into one write; large ones go as they
		// are, without a copy.
		if len(buf)+len(c) <= 64<<10 {
			buf = append(buf, c...)
			continue
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
		if _, err := w.Write(c); err != nil {
			return err
		}
	}
	if !empty {
		buf = append(buf, "\n  ]"...)
	}
	_, err := w.Write(appendSummary(buf, r.Summary))
	return err
}

// writeSpilledJSON is writeJSON for results spilled to a file: they are
// copied to w in the same bytes.
func (r *Report) writeSpilledJSON(w io.Writer) error {
	// The first element's comma is skipped.
	results, err := r.spill.contents(1)
	if err != nil {
		return err
	}
	buf := []byte(jsonHead)
	if results.Size() == 0 {
		buf = append(buf, ']')
	} else {
		if _, err := w.Write(buf); err != nil {
			return err
		}
		if _, err := io.Copy(w, results); err != nil {
			return err
		}
		buf = append(buf[:0], "\n  ]"...)
	}
	_, err = w.Write(appendSummary(buf, r.Summary))
	return err
}

// jsonHead opens a JSON report, up to its first result.
const jsonHead = "{\n  \"results\": ["

// appendSummary ends a JSON report with its summary.
func appendSummary(buf []byte, s Summary) []byte {
	buf = append(buf, ",\n  \"summary\": {\n    \"pass\": "...)
	buf = strconv.AppendInt(buf, int64(s.Pass), 10)
	buf = append(buf, ",\n    \"fail\": "...)
	buf = strconv.AppendInt(buf, int64(s.Fail), 10)
	buf = append(buf, ",\n    \"error\": "...)
	buf = strconv.AppendInt(buf, int64(s.Error), 10)
	if s.Skip > 0 {
		buf = append(buf, ",\n    \"skip\": "...)
		buf = strconv.AppendInt(buf, int64(s.Skip), 10)
	}
	return append(buf, "\n  }\n}\n"...)
}

const hexDigits = "0123456789abcdef"

// jsonSafe marks the ASCII bytes encoding/json writes as they are.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendJSONString quotes s as encoding/json does by default: HTML-safe
// (<, > and & escaped), invalid UTF-8 replaced by U+FFFD, and U+2028 and
// U+2029 escaped for JavaScript.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
