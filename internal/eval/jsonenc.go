package eval

import (
	"io"
	"strconv"
	"unicode/utf8"
)

// The JSON report is written by hand rather than through encoding/json: its
// shape is fixed, and reflection was a fifth of `portal eval -o json`. The
// bytes are exactly what json.Encoder with SetIndent("", "  ") writes for a
// Report (TestJSONMatchesEncodingJSON and FuzzJSONString hold it to that).

// appendResultElem appends r as an element of the "results" array, led by a
// comma that writeJSON drops from the first element.
func appendResultElem(b []byte, r *Result) []byte {
	b = append(b, ",\n    {\n      \"resource\": {\n        \"apiVersion\": "...)
	b = appendJSONString(b, r.Resource.APIVersion)
	b = append(b, ",\n        \"kind\": "...)
	b = appendJSONString(b, r.Resource.Kind)
	b = append(b, ",\n        \"namespace\": "...)
	b = appendJSONString(b, r.Resource.Namespace)
	b = append(b, ",\n        \"name\": "...)
	b = appendJSONString(b, r.Resource.Name)
	b = append(b, "\n      },\n      \"rule\": "...)
	b = appendJSONString(b, r.Rule)
	b = append(b, ",\n      \"severity\": "...)
	b = appendJSONString(b, r.Severity)
	b = append(b, ",\n      \"enforcementAction\": "...)
	b = appendJSONString(b, r.EnforcementAction)
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
	return append(b, "\n    }"...)
}

// writeJSON writes the report; elems are the results as appendResultElem
// encodes them.
func (r *Report) writeJSON(w io.Writer) error {
	elems := r.encoded
	if !r.isJSON {
		elems = nil
		for i := range r.Results {
			elems = appendResultElem(elems, &r.Results[i])
		}
	}
	head := []byte("{\n  \"results\": [")
	if len(elems) == 0 {
		head = append(head, ']')
	} else {
		elems = elems[1:] // the first element's comma
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	if _, err := w.Write(elems); err != nil {
		return err
	}
	tail := make([]byte, 0, 128)
	if len(elems) > 0 {
		tail = append(tail, "\n  ]"...)
	}
	tail = append(tail, ",\n  \"summary\": {\n    \"pass\": "...)
	tail = strconv.AppendInt(tail, int64(r.Summary.Pass), 10)
	tail = append(tail, ",\n    \"fail\": "...)
	tail = strconv.AppendInt(tail, int64(r.Summary.Fail), 10)
	tail = append(tail, ",\n    \"error\": "...)
	tail = strconv.AppendInt(tail, int64(r.Summary.Error), 10)
	tail = append(tail, "\n  }\n}\n"...)
	_, err := w.Write(tail)
	return err
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does by default: HTML-safe
// (<, > and & escaped), invalid UTF-8 replaced by U+FFFD, and U+2028 and
// U+2029 escaped for JavaScript.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
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
