package actions

import (
	"strings"
	"testing"
)

// FuzzParseRateLimit: any rate limit string parses or is refused with an
// error that says how to write it; nothing panics, and a parsed window is
// bounded.
func FuzzParseRateLimit(f *testing.F) {
	for _, s := range []string{"5/min", "0/s", "10/h", "/min", "5/", "99999999999/s", "-1/s", "5/day", "1/min/2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseRateLimit(s)
		if err != nil {
			if !strings.Contains(err.Error(), "rate limit") {
				t.Fatalf("error %q does not say what to fix", err)
			}
			return
		}
		if w.count < 0 || w.count > maxWindowEntriesPerSlot || w.per <= 0 {
			t.Fatalf("%q parsed to an unbounded window %+v", s, w)
		}
	})
}

func TestParseRateLimit(t *testing.T) {
	for s, ok := range map[string]bool{"5/min": true, "0/s": true, "10/h": true, "5/day": false, "x/min": false, "5": false} {
		if _, err := ParseRateLimit(s); (err == nil) != ok {
			t.Errorf("ParseRateLimit(%q) error %v, want ok=%v", s, err, ok)
		}
	}
}
