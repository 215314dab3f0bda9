package cache

import "encoding/json"

// The sizes below are the lengths json.Marshal gives a Table and its parts,
// counted as encoding/json writes them without keeping the encoding (its
// encoder reuses pooled buffers): a table is checked against
// MaxTableBytes, and a route against what is left of it, before the table
// is encoded, so a table over the bound is refused without building tens
// of MiB first. TestEncodedSizeIsMarshalLength holds the sums to
// json.Marshal.

// EncodedSize is len(json.Marshal(t)). It allocates next to nothing,
// whatever the table's size: one encoder, given pointers into the table.
func (t *Table) EncodedSize() int {
	var z sizer
	s := TableSize{fixed: z.len(&Table{Gateway: t.Gateway, Default: t.Default})}
	for i := range t.Policies {
		s.AddPolicy(z.len(&t.Policies[i]))
	}
	for i := range t.Rows {
		s.AddRow(z.len(&t.Rows[i]))
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
	return TableSize{fixed: encodedLen(&Table{Gateway: gateway, Default: deflt})}
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
func PolicySize(p TablePolicy) int { return encodedLen(&p) }

// RowSize is len(json.Marshal(r)).
func RowSize(r TableRow) int { return encodedLen(&r) }

// HostnameSize is what one hostname adds to RowSize of a row without
// hostnames: a route's rows differ only in their hostname, so its bytes
// are counted once per match and once per hostname.
func HostnameSize(h string) int {
	if h == "" {
		return 0
	}
	// ,"hostnames":["h"] after "route", which every row has.
	return len(`,"hostnames":[]`) + encodedLen(h)
}

// encodedLen is len(json.Marshal(v)).
func encodedLen(v any) int {
	var z sizer
	return z.len(v)
}

// sizer measures encodings with one encoder.
type sizer struct {
	n   byteCount
	enc *json.Encoder
}

// len is len(json.Marshal(v)). The table's types hold only strings,
// numbers, booleans and lists of them, which always encode.
func (z *sizer) len(v any) int {
	if z.enc == nil {
		z.enc = json.NewEncoder(&z.n)
	}
	before := z.n
	_ = z.enc.Encode(v)
	return int(z.n-before) - 1 // Encode ends the value with a newline
}

// byteCount is an io.Writer that keeps only how much was written.
type byteCount int

func (c *byteCount) Write(p []byte) (int, error) {
	*c += byteCount(len(p))
	return len(p), nil
}
