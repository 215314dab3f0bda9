package ruleset

import (
	"bytes"
	"testing"
)

// MaxResponseBodyBytes clamps the SecResponseBodyLimit a rule set ends with,
// whether the bundle sets it or a Core Rule Set file it includes does, and
// leaves a smaller one alone: a Reject rule set interrupts a response of
// the limit in force (Coraza rejects at the limit) and takes one byte less.
func TestClampResponseBody(t *testing.T) {
	const max = 64 << 10
	base := "SecRuleEngine On\nSecResponseBodyAccess On\nSecResponseBodyMimeType text/plain\nSecResponseBodyLimitAction Reject\n"
	for _, tc := range []struct {
		name, rules string
		max, want   int64
	}{
		{"raised by the bundle", base + "SecResponseBodyLimit 1073741824\n", max, max},
		{"raised after an include", "Include @coraza.conf-recommended\n" + base + "SecResponseBodyLimit 1073741824\n", max, max},
		{"smaller, kept", base + "SecResponseBodyLimit 1000\n", max, 1000},
		{"Coraza's default below the cap, kept", base, 1 << 20, corazaResponseBodyLimit},
		{"Coraza's default, clamped", base, max, max},
		{"the CRS's 512 KiB, clamped", "Include @coraza.conf-recommended\n" + base, max, max},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			c, err := Compile(Bundle{Rules: tc.rules}, Options{MaxResponseBodyBytes: tc.max})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			if got := responseLimitOf(t, c, want+1); got != want {
				t.Fatalf("the response body limit in force is %d, want %d", got, want)
			}
		})
	}
}

// responseLimitOf finds the response body limit of a Reject rule set: the
// smallest body that is interrupted, searched up to upTo bytes.
func responseLimitOf(t *testing.T, c *Compiled, upTo int64) int64 {
	t.Helper()
	interrupted := func(n int64) bool {
		tx := c.WAF.NewTransaction()
		defer func() { _ = tx.Close() }()
		tx.ProcessURI("/", "GET", "HTTP/1.1")
		tx.ProcessRequestHeaders()
		if _, err := tx.ProcessRequestBody(); err != nil {
			t.Fatal(err)
		}
		tx.AddResponseHeader("Content-Type", "text/plain")
		tx.ProcessResponseHeaders(200, "HTTP/1.1")
		it, _, err := tx.WriteResponseBody(bytes.Repeat([]byte("a"), int(n)))
		if err != nil {
			t.Fatal(err)
		}
		return it != nil
	}
	lo, hi := int64(0), upTo+1 // interrupted(lo) is false, interrupted(hi) true
	if !interrupted(hi) {
		return hi + 1
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if interrupted(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
