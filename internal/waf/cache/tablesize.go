package cache

import (
	"strconv"
	"unicode/utf8"
)

// The sizes below are the exact lengths json.Marshal gives a Table and its
// parts, computed without building the encoding: a table is checked
// against MaxTableBytes, and a route against what is left of it, before
// anything is encoded, so a table over the bound costs a walk over its
// strings and no allocation. TestEncodedSizeIsMarshalLength holds them to
// json.Marshal for every field, so a field added to these types without
// its size here fails that test.

// EncodedSize is len(json.Marshal(t)).
func (t *Table) EncodedSize() int {
	s := NewTableSize(t.Gateway, t.Default)
	for _, p := range t.Policies {
		s.AddPolicy(PolicySize(p))
	}
	for _, r := range t.Rows {
		s.AddRow(RowSize(r))
	}
	return s.Bytes()
}

// TableSize adds up the encoded size of a table as its policies and rows
// are chosen.
type TableSize struct {
	fixed             int
	policies, nPolicy int
	rows, nRows       int
}

// NewTableSize is the size of a table of Gateway gateway with default
// policy deflt and nothing else.
func NewTableSize(gateway string, deflt int) TableSize {
	// {"gateway":...,"default":N}
	return TableSize{fixed: len(`{"gateway":`) + StringSize(gateway) + len(`,"default":`) + intSize(int64(deflt)) + len(`}`)}
}

// AddPolicy counts a policy of encoded size n (PolicySize).
func (s *TableSize) AddPolicy(n int) { s.policies += n; s.nPolicy++ }

// AddRow counts a row of encoded size n (RowSize).
func (s *TableSize) AddRow(n int) { s.AddRows(1, n) }

// AddRows counts n rows of bytes encoded bytes together.
func (s *TableSize) AddRows(n, bytes int) { s.rows += bytes; s.nRows += n }

// Bytes is the encoded size of the table counted so far.
func (s TableSize) Bytes() int {
	return s.fixed + listSize(len(`,"policies":`), s.policies, s.nPolicy) + listSize(len(`,"rows":`), s.rows, s.nRows)
}

// listSize is the size of an omitempty list field of n elements of size
// elems together: the key, brackets and commas.
func listSize(key, elems, n int) int {
	if n == 0 {
		return 0
	}
	return key + 2 + elems + n - 1
}

// PolicySize is len(json.Marshal(p)).
func PolicySize(p TablePolicy) int {
	var o object
	o.field("policy", StringSize(p.Policy))
	if rs := p.RuleSet; rs != nil {
		var r object
		r.field("namespace", StringSize(rs.Namespace))
		r.field("name", StringSize(rs.Name))
		r.field("uuid", StringSize(rs.UUID))
		o.field("ruleSet", r.size())
	}
	o.optString("unavailable", p.Unavailable)
	if p.FailOpen {
		o.field("failOpen", len("true"))
	}
	if ex := p.Exclusions; ex != nil {
		var e object
		if len(ex.RuleIDs) > 0 {
			n := 0
			for _, id := range ex.RuleIDs {
				n += intSize(id)
			}
			e.field("ruleIDs", arraySize(n, len(ex.RuleIDs)))
		}
		e.optStrings("tags", ex.Tags)
		if ex.InboundAnomalyThreshold != 0 {
			e.field("inboundAnomalyThreshold", intSize(int64(ex.InboundAnomalyThreshold)))
		}
		o.field("exclusions", e.size())
	}
	if len(p.SecurityLogs) > 0 {
		n := 0
		for _, l := range p.SecurityLogs {
			var s object
			s.field("name", StringSize(l.Name))
			s.field("type", StringSize(l.Type))
			s.optString("path", l.Path)
			s.optString("server", l.Server)
			s.optString("protocol", l.Protocol)
			n += s.size()
		}
		o.field("securityLogs", arraySize(n, len(p.SecurityLogs)))
	}
	return o.size()
}

// RowSize is len(json.Marshal(r)).
func RowSize(r TableRow) int {
	var o object
	o.field("route", StringSize(r.Route))
	o.optStrings("hostnames", r.Hostnames)
	if r.Path != nil {
		o.field("path", matchSize(*r.Path))
	}
	o.optString("method", r.Method)
	o.optMatches("headers", r.Headers)
	o.optMatches("query", r.Query)
	o.field("policy", intSize(int64(r.Policy)))
	return o.size()
}

// HostnameSize is what one hostname adds to RowSize of a row without
// hostnames: a route's rows differ only in their hostname, so its bytes
// are counted once per match and once per hostname.
func HostnameSize(h string) int {
	if h == "" {
		return 0
	}
	// ,"hostnames":["h"] after "route", which every row has.
	return len(`,"hostnames":[]`) + StringSize(h)
}

func matchSize(m StringMatch) int {
	var o object
	o.field("type", StringSize(m.Type))
	o.optString("name", m.Name)
	o.field("value", StringSize(m.Value))
	return o.size()
}

// object adds up the fields of a JSON object.
type object struct{ n, fields int }

// field counts "key":value with value of size v.
func (o *object) field(key string, v int) {
	o.n += len(key) + 3 + v // quotes and colon
	o.fields++
}

func (o *object) optString(key, s string) {
	if s != "" {
		o.field(key, StringSize(s))
	}
}

func (o *object) optStrings(key string, ss []string) {
	if len(ss) == 0 {
		return
	}
	n := 0
	for _, s := range ss {
		n += StringSize(s)
	}
	o.field(key, arraySize(n, len(ss)))
}

func (o *object) optMatches(key string, ms []StringMatch) {
	if len(ms) == 0 {
		return
	}
	n := 0
	for _, m := range ms {
		n += matchSize(m)
	}
	o.field(key, arraySize(n, len(ms)))
}

// size is the object's length: braces and the commas between fields.
func (o *object) size() int {
	if o.fields == 0 {
		return 2
	}
	return o.n + 2 + o.fields - 1
}

func arraySize(elems, n int) int { return elems + 2 + max(n-1, 0) }

func intSize(n int64) int {
	var buf [20]byte
	return len(strconv.AppendInt(buf[:0], n, 10))
}

// StringSize is the length of s as encoding/json writes it: quoted, with
// HTML-sensitive bytes, control bytes, U+2028 and U+2029 escaped and each
// byte that is not UTF-8 replaced by \ufffd.
func StringSize(s string) int {
	n := 2
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&':
				n++
			case b == '"', b == '\\', b == '\b', b == '\f', b == '\n', b == '\r', b == '\t':
				n += 2
			default:
				n += len(`\u00XX`)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += len(`\ufffd`)
		default:
			n += size
		}
		i += size
	}
	return n
}
