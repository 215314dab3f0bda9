package admission

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReadBody: the body is read whole whatever its Content-Length claims
// (none, the truth, less, more), and never past maxRequestBytes+1.
func TestReadBody(t *testing.T) {
	review := strings.Repeat("r", 4000)
	huge := strings.Repeat("h", maxRequestBytes+10)
	for _, c := range []struct {
		name, body string
		length     int64
		want       int
	}{
		{"no length (chunked)", review, -1, len(review)},
		{"the length", review, int64(len(review)), len(review)},
		{"a length too small", review, 10, len(review)},
		{"a length too large", review, 10_000, len(review)},
		{"a length past the presize", review, bodyPresize + 1, len(review)},
		{"a body past the bound", huge, int64(len(huge)), maxRequestBytes + 1},
		{"a body past the bound, a small length", huge, 100, maxRequestBytes + 1},
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(c.body))
		r.ContentLength = c.length
		got, err := readBody(r)
		if err != nil || len(got) != c.want || string(got) != c.body[:c.want] {
			t.Errorf("%s: read %d bytes (%v), want %d", c.name, len(got), err, c.want)
		}
	}
}
