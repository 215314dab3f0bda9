package eval

import (
	"slices"
	"strings"
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// The YAML report is what sigs.k8s.io/yaml.Marshal wrote for the whole
// report: encoding/json, then the JSON read back by go.yaml.in/yaml/v2 and
// written by it. The round trip through JSON was most of -o yaml's time;
// the entries are now given to the YAML encoder as the maps the round trip
// made, strings made valid UTF-8 as encoding/json makes them, so the bytes
// are the same (TestEncodedFormatsMatchWhole).

// yamlEntries appends results to out as entries of the report's results
// sequence. An entry whose strings appendYAMLEntry can write is written
// directly, in the encoder's bytes; another goes through the encoder.
// Through the encoder, every entry cost about ten times what its JSON does
// (-o yaml of 100,000 pods: 41 s against 4.3 s for -o json, most of it
// the encoder growing and clearing its buffers).
func yamlEntries(out []byte, results []Result) ([]byte, error) {
	out = slices.Grow(out, yamlEntrySize*len(results))
	for i := range results {
		var ok bool
		if out, ok = appendYAMLEntry(out, &results[i]); ok {
			continue
		}
		// A block sequence's entries are written one after another, so
		// one entry encoded alone is its bytes in the whole sequence.
		b, err := yamlv2.Marshal([]any{yamlResult(&results[i])})
		if err != nil {
			// The encoder refuses some strings it writes escaped once
			// read back from JSON (control characters): that way, for
			// this entry.
			if b, err = yaml.Marshal(results[i : i+1]); err != nil {
				return nil, err
			}
		}
		out = append(out, b...)
	}
	return out, nil
}

// yamlEntrySize is about what an entry of the pod-security bundle's
// results takes: a batch's buffer is grown once.
const yamlEntrySize = 256

// appendYAMLEntry appends r as the encoder writes yamlResult(r) as an entry
// of a sequence (its keys sorted), or returns buf unchanged and false when
// a string needs what appendYAMLScalar leaves to the encoder.
func appendYAMLEntry(buf []byte, r *Result) ([]byte, bool) {
	start := len(buf)
	// The first key written follows the entry's "- " in place of its
	// indent, which is as long: the value's column and its next lines'
	// indent are the same either way.
	lead := "- "
	field := func(indent, key, v string, always bool) bool {
		if v == "" && !always {
			return true
		}
		if lead != "" {
			indent, lead = lead, ""
		}
		buf = append(append(append(buf, indent...), key...), ": "...)
		var ok bool
		buf, ok = appendYAMLScalar(buf, v, len(indent)+len(key)+2, len(indent)+2)
		buf = append(buf, '\n')
		return ok
	}
	ok := field("  ", "category", r.Category, false) &&
		field("  ", "container", r.Container, false) &&
		field("  ", "enforcementAction", r.EnforcementAction, true) &&
		field("  ", "exception", r.Exception, false) &&
		field("  ", "message", r.Message, false)
	if ok {
		buf = append(buf, "  resource:\n"...)
		ok = field("    ", "apiVersion", r.Resource.APIVersion, true) &&
			field("    ", "kind", r.Resource.Kind, true) &&
			field("    ", "name", r.Resource.Name, true) &&
			field("    ", "namespace", r.Resource.Namespace, true)
	}
	ok = ok &&
		field("  ", "result", r.Result, true) &&
		field("  ", "rule", r.Rule, true) &&
		field("  ", "severity", r.Severity, true)
	if !ok {
		return buf[:start], false
	}
	return buf, true
}

// appendYAMLScalar appends s as the encoder writes a string value of a
// block mapping, starting at column col, for the strings whose rules are
// short to state: empty, or printable ASCII starting with a letter. Such a
// string is plain unless it reads back as a boolean or null (then
// double-quoted), or holds ": " or " #" or ends in ':' or ' ' (then
// single-quoted, quotes doubled). It returns false for any other string:
// one starting with a digit or a sign may read back as a number, a first
// indicator character or a control character change the quoting, and
// those are the encoder's to decide.
func appendYAMLScalar(buf []byte, s string, col, indent int) ([]byte, bool) {
	if s == "" {
		return append(buf, `""`...), true
	}
	if c := s[0] | 0x20; c < 'a' || c > 'z' {
		return buf, false
	}
	if yamlWord(s) {
		return append(append(append(buf, '"'), s...), '"'), true
	}
	plain := s[len(s)-1] != ' ' && s[len(s)-1] != ':'
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e:
			return buf, false
		case c == ':' && i+1 < len(s) && s[i+1] == ' ', c == '#' && s[i-1] == ' ':
			// s[i-1]: s starts with a letter.
			plain = false
		}
	}
	if !plain {
		buf = append(buf, '\'')
		col++
	}
	return appendYAMLFolded(buf, s, col, indent, !plain), true
}

// yamlWidth is the encoder's line width: past it, a plain or single-quoted
// value goes on at a space, on a line of its own. It is the encoder's
// default; yaml.FutureLineWrap, which nothing in this binary calls, would
// turn the encoder's wrapping off everywhere and FuzzYAMLEntries's long
// seeds with it.
const yamlWidth = 80

// appendYAMLFolded writes s as the encoder writes a plain or (quoted) a
// single-quoted scalar's characters: at a space after a non-space, once
// the line is past yamlWidth and another non-space follows, the line ends
// and the next begins at indent instead of the space.
func appendYAMLFolded(buf []byte, s string, col, indent int, quoted bool) []byte {
	if col+len(s) <= yamlWidth && (!quoted || strings.IndexByte(s, '\'') < 0) {
		// No space can come past the width.
		buf = append(buf, s...)
		if quoted {
			buf = append(buf, '\'')
		}
		return buf
	}
	spaces := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' {
			if !spaces && col > yamlWidth && i+1 < len(s) && s[i+1] != ' ' {
				buf = append(buf, '\n')
				for range indent {
					buf = append(buf, ' ')
				}
				col = indent
			} else {
				buf = append(buf, ' ')
				col++
			}
			spaces = true
			continue
		}
		if quoted && c == '\'' {
			buf = append(buf, '\'')
			col++
		}
		buf = append(buf, c)
		col++
		spaces = false
	}
	if quoted {
		buf = append(buf, '\'')
	}
	return buf
}

// yamlWord reports the strings starting with a letter that the encoder's
// reader resolves to a boolean or null, so it quotes them. A switch: a map
// lookup for every string of every entry was a tenth of the run.
func yamlWord(s string) bool {
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
		"true", "True", "TRUE", "false", "False", "FALSE",
		"on", "On", "ON", "off", "Off", "OFF", "null", "Null", "NULL":
		return true
	}
	return false
}

func yamlResult(r *Result) map[string]any {
	m := map[string]any{
		"resource": map[string]any{
			"apiVersion": jsonText(r.Resource.APIVersion),
			"kind":       jsonText(r.Resource.Kind),
			"namespace":  jsonText(r.Resource.Namespace),
			"name":       jsonText(r.Resource.Name),
		},
		"rule":              jsonText(r.Rule),
		"severity":          jsonText(r.Severity),
		"enforcementAction": jsonText(r.EnforcementAction),
		"result":            jsonText(r.Result),
	}
	for k, v := range map[string]string{"category": r.Category, "container": r.Container, "message": r.Message, "exception": r.Exception} {
		if v != "" {
			m[k] = jsonText(v)
		}
	}
	return m
}

// jsonText is s as encoding/json reads it back: each byte of invalid UTF-8
// replaced by U+FFFD.
func jsonText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return string(out)
}
