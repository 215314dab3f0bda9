package ascii

import (
	"testing"
	"unicode/utf8"
)

// FuzzIs holds Is to a byte-by-byte check, on lengths around the
// eight-byte steps.
func FuzzIs(f *testing.F) {
	for _, s := range []string{"", "a", "abcdefgh", "abcdefg\x80", "abcdefghi\xff", "caf\u00e9 au lait"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := true
		for i := 0; i < len(s); i++ {
			if s[i] >= utf8.RuneSelf {
				want = false
			}
		}
		if got := Is(s); got != want {
			t.Fatalf("Is(%q) = %v, want %v", s, got, want)
		}
	})
}
