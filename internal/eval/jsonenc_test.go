package eval

import (
	"encoding/json"
	"testing"
)

// FuzzJSONString checks appendJSONString against encoding/json on any string.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "<>&", "\"\\", "\x00\b\f\n\r\t\x1f\x7f", "\u2028\u2029", "\xff", "é\xc3", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}
