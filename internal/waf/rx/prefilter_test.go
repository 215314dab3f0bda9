package rx

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/vilaca/portal/internal/waf/operatortest"
)

func TestRequiredLiterals(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		want    []string // nil: no filter
	}{
		{`(?i)union\s+select`, []string{"union"}}, // the first of equals
		{`(?i)\b(?:ab|cd)(?:ef|gh)\b`, []string{"abef", "abgh", "cdef", "cdgh"}},
		{`(?i)a(?:pt|wk)`, []string{"apt", "awk"}},
		{`<script`, []string{"<script"}},
		{`[Ee]val\(`, []string{"eval("}},
		// An alternative without a literal, or a match that may be empty,
		// rules nothing out.
		{`(?i)select|\w+`, nil},
		{`a*`, nil},
		{`(?:abc)?`, nil},
		// A rune outside ASCII is never required: the filter folds ASCII only.
		{`(?i)café`, []string{"caf"}},
		{`é`, nil},
	} {
		re, err := syntax.Parse("(?sm)"+tc.pattern, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		got := required(re.Simplify())
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: required literals %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

// TestPrefilterCaseFolding: (?i)k matches the Kelvin sign and (?i)s the
// long s, so a subject with them must reach RE2 even though it contains
// none of the ASCII literals.
func TestPrefilterCaseFolding(t *testing.T) {
	for _, tc := range []struct{ pattern, subject string }{
		{`(?i)kill`, "\u212aill"},
		{`(?i)select`, "\u017felect"},
		{`(?i)<script`, "<\u017fcript"},
	} {
		if !regexp.MustCompile(tc.pattern).MatchString(tc.subject) {
			t.Fatalf("Go's regexp does not match %q against %s", tc.subject, tc.pattern)
		}
		op := newOp(t, tc.pattern)
		if !op.Evaluate(&operatortest.Tx{}, tc.subject) {
			t.Errorf("@rx %s does not match %q", tc.pattern, tc.subject)
		}
	}
}

// TestFoldsToASCII: every rune outside ASCII whose case folds reach ASCII
// makes foldsToASCII true; a subject of other runes may use the filter.
func TestFoldsToASCII(t *testing.T) {
	n := 0
	for r := rune(utf8.RuneSelf); r <= unicode.MaxRune; r++ {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < utf8.RuneSelf {
				n++
				if !foldsToASCII("x" + string(r) + "y") {
					t.Errorf("%U folds to %q and does not skip the filter", r, f)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no rune folds to ASCII: the check checked nothing")
	}
	if foldsToASCII("caf\u00e9 \xff\xc5") {
		t.Error("é and invalid bytes skip the filter")
	}
}

// TestPrefilterBeyondASCII: subjects that are not ASCII (UTF-8 or not
// UTF-8 at all) are filtered too, and still match where the pattern does.
func TestPrefilterBeyondASCII(t *testing.T) {
	p := newPrefilter(`(?sm)(?i)\b(?:union|select)\b`)
	if p.mayMatch("caf\u00e9 cr\u00e8me, \xff\xfe") {
		t.Error("text without a keyword was let through to RE2")
	}
	for _, s := range []string{"\u00e9 UNION \u00e9", "\xffselect\xff", "\u017felect"} {
		if !p.mayMatch(s) {
			t.Errorf("%q was ruled out", s)
		}
	}
}

// TestPrefilterRulesOutBenignText shows the filter working: prose without
// the literals never reaches RE2, and a subject with them does.
func TestPrefilterRulesOutBenignText(t *testing.T) {
	p := newPrefilter(`(?sm)(?i)\b(?:union|select|insert)\b.{0,40}\bfrom\b`)
	if p == nil {
		t.Fatal("no prefilter for a pattern of keywords")
	}
	if p.mayMatch("Please deliver after five, the side door is open.") {
		t.Error("prose without a keyword was let through to RE2")
	}
	if !p.mayMatch("1 UNION SELECT password FROM users") {
		t.Error("a subject with the keywords was ruled out")
	}
}

// FuzzPrefilter checks the one promise of the filter on random patterns and
// subjects: whatever Go's regexp matches, the filter lets through.
func FuzzPrefilter(f *testing.F) {
	f.Add(`(?i)union\s+select`, "1 UnIoN  SeLeCt 2")
	f.Add(`(?i)kill`, "\u212aill")
	f.Add(`a(?:b|c)?d`, "ad")
	f.Add(`[Ee]val\(`, "EVAL(")
	f.Add(`\bx{2,3}y`, "xxxy")
	f.Fuzz(func(t *testing.T, pattern, subject string) {
		expr := "(?sm)" + pattern
		re, err := regexp.Compile(expr)
		if err != nil || len(pattern) > 200 {
			return
		}
		if re.MatchString(subject) && !newPrefilter(expr).mayMatch(subject) {
			t.Fatalf("%s matches %q, the prefilter ruled it out", pattern, subject)
		}
	})
}

// TestPrefilterBounds: a rule author's pattern of many long alternatives
// gets no filter (RE2 alone runs it), not an automaton of megabytes that
// RE2's memory bound does not see. Many punctuation literals go to the
// automaton rather than a strings.Contains each.
func TestPrefilterBounds(t *testing.T) {
	var words, plain []string
	// Words without shared prefixes, which the parser would factor out.
	x := uint32(1)
	for range maxWordBytes/8 + 1 {
		var w []byte
		for range 8 {
			x = x*1664525 + 1013904223
			w = append(w, 'a'+byte(x>>24)%26)
		}
		words = append(words, string(w))
	}
	if p := newPrefilter("(?sm)(?:" + strings.Join(words, "|") + ")"); p != nil {
		t.Errorf("a filter of %d words was built", len(words))
	}
	if p := newPrefilter("(?sm)(?:" + strings.Join(words[:3], "|") + ")"); p == nil {
		t.Errorf("no filter for three words")
	}
	for i := range maxPlain + 1 {
		plain = append(plain, strings.Repeat("!", i+1)+"#")
	}
	p := newPrefilter("(?sm)(?:" + strings.Join(plain, "|") + ")")
	switch {
	case p == nil:
		t.Fatalf("no filter for %d punctuation literals", len(plain))
	case len(p.plain) > maxPlain:
		t.Errorf("%d punctuation literals, each a strings.Contains", len(p.plain))
	case !p.mayMatch("x!!!#y") || p.mayMatch("x!!!y#"):
		t.Errorf("the automaton of punctuation literals answers wrong")
	}
	// The CRS's path traversal check requires ".." and one of 24 strings.
	if p := newPrefilter(`(?sm)(?:^|[/;\x5c])\.{2,3}[/;\x5c]`); p == nil || p.mayMatch("app.example.com") || !p.mayMatch("a/../b") {
		t.Errorf("the path traversal pattern is not filtered")
	}
}
