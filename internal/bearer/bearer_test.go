package bearer

import "testing"

func TestToken(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer abc":       "abc",
		"bearer abc":       "abc",
		"BEARER  abc ":     "abc",
		"Bearer a b":       "a b",
		"Bearer abc\n ":    "abc",
		"Bearer 12345678":  "12345678",
		"Bearer 123456789": "",
		" Bearer abc":      "",
		"Bearer":           "",
		"Bearerabc":        "",
		"Basic abc":        "",
		"Token abc":        "",
		"Bearer \t":        "",
		"":                 "",
		"Bearer\tabc":      "",
		"xBearer abc":      "",
	} {
		got, ok := Token(h, 8)
		if got != want || ok != (want != "") {
			t.Errorf("Token(%q, 8) = %q, %v; want %q", h, got, ok, want)
		}
	}
}
