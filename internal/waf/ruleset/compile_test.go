package ruleset

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/corazawaf/coraza/v3"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// crsRules is the three-line RuleSource that gives a full CRS, switched to
// blocking.
const crsRules = "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nInclude @owasp_crs/*.conf\n"

func mustCompile(t testing.TB, b Bundle) *Compiled {
	t.Helper()
	c, err := Compile(b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// status runs a GET of uri through w and returns the interruption status, or
// 0 when the request passes.
func status(w coraza.WAF, uri string) int {
	tx := w.NewTransaction()
	defer tx.Close()
	tx.ProcessConnection("127.0.0.1", 40000, "127.0.0.1", 80)
	tx.ProcessURI(uri, "GET", "HTTP/1.1")
	tx.AddRequestHeader("Host", "example.com")
	tx.AddRequestHeader("User-Agent", "portal-test")
	tx.AddRequestHeader("Accept", "*/*")
	if it := tx.ProcessRequestHeaders(); it != nil {
		return it.Status
	}
	if it, _ := tx.ProcessRequestBody(); it != nil {
		return it.Status
	}
	return 0
}

func TestCompileCRS(t *testing.T) {
	c := mustCompile(t, Join([]Source{{Name: "crs", Rules: crsRules}, {Name: "on", Rules: "SecRuleEngine On"}}))
	if c.RuleCount < 600 {
		t.Fatalf("full CRS compiled to %d rules", c.RuleCount)
	}
	if got := status(c.WAF, "/?id=1'%20OR%20'1'='1"); got != 403 {
		t.Errorf("SQL injection: status %d, want 403", got)
	}
	if got := status(c.WAF, "/index.html?q=hello"); got != 0 {
		t.Errorf("clean request: status %d, want 0", got)
	}
}

func TestCompileLocatesError(t *testing.T) {
	cases := []struct {
		name    string
		sources []Source
		source  string
		line    int
		want    string
	}{
		{"second source", []Source{
			{Name: "base", Rules: "SecRuleEngine On\nSecRule ARGS \"@rx a\" \"id:1,deny\"\n"},
			{Name: "custom", Rules: "# custom\n\nSecRule ARGS \"@rx b\" \\\n  \"id:2,deny,bogus:1\"\nSecRule ARGS \"@rx c\" \"id:3,deny\"\n"},
		}, "custom", 3, `invalid action "bogus"`},
		{"after the CRS", []Source{
			{Name: "crs", Rules: crsRules},
			{Name: "tuning", Rules: "SecRuleRemoveById 920171\nSecRuleEngine Sometimes\n"},
		}, "tuning", 2, "secruleengine"},
		{"duplicate id", []Source{
			{Name: "a", Rules: "SecRule ARGS \"@rx a\" \"id:7,deny\"\n"},
			{Name: "b", Rules: "SecRule ARGS \"@rx b\" \"id:7,deny\"\n"},
		}, "b", 1, "duplicated rule id 7"},
		{"unknown directive", []Source{{Name: "a", Rules: "SecRuleEngine On\nSecNope 1\n"}}, "a", 2, "unknown directive"},
		{"unclosed double quote", []Source{{Name: "a", Rules: "SecRule ARGS \"@rx a\" \"id:1,deny,msg:'x'\nSecRule ARGS \"@rx b\" \"id:2,deny\"\n"}}, "a", 1,
			`a double quote is never closed`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(Join(tc.sources), Options{})
			e, ok := AsError(err)
			if !ok || len(e.Problems) != 1 {
				t.Fatalf("got %v, want one located problem", err)
			}
			p := e.Problems[0]
			if p.Kind != KindInvalid || p.Source != tc.source || p.SourceLine != tc.line || !strings.Contains(p.Message, tc.want) {
				t.Fatalf("got %+v, want %s line %d containing %q", p, tc.source, tc.line, tc.want)
			}
			t.Log(err)
		})
	}
}

func TestCompileDataFiles(t *testing.T) {
	rules := "SecRuleEngine On\nSecRule ARGS \"@pmFromFile words.txt\" \"id:10,phase:1,deny,status:403\"\n"
	evil := mustCompile(t, Join([]Source{{Name: "r", Rules: rules}}, map[string][]byte{"words.txt": []byte("evil\n")}))
	// Same file name, other content, both WAFs alive: Coraza memoizes
	// @pmFromFile matchers by directory and name, so without the digest
	// directory the second WAF would reuse the first one's word list.
	wicked := mustCompile(t, Join([]Source{{Name: "r", Rules: rules}},
		map[string][]byte{"words.txt": []byte("evil\n")}, map[string][]byte{"words.txt": []byte("wicked\n")}))
	for _, tc := range []struct {
		w    coraza.WAF
		uri  string
		want int
	}{
		{evil.WAF, "/?q=evil", 403}, {evil.WAF, "/?q=wicked", 0},
		{wicked.WAF, "/?q=wicked", 403}, {wicked.WAF, "/?q=evil", 0},
	} {
		if got := status(tc.w, tc.uri); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.uri, got, tc.want)
		}
	}
}

// TestUnsupported: a driver's limits find the listed rules of the CRS that
// are still in the set after SecRuleRemoveById and SecRuleRemoveByTag, and
// the rules using a listed operator, located in their RuleSource; a driver
// without limits finds nothing. (The Istio WASM driver's own list is
// checked against the CRS in internal/waf/engine.)
func TestUnsupported(t *testing.T) {
	const driver = wafv1alpha1.DriverType("limited")
	limits := Limits{
		Runtime:   "a test build",
		Rules:     map[int]string{920171: "a", 941310: "b", 922110: "c", 922130: "d"},
		Operators: map[string]string{"validateSchema": "matches every request"},
	}
	crs := mustCompile(t, Join([]Source{{Name: "crs", Rules: crsRules}}))
	ids := func(fs []Finding) []int {
		var out []int
		for _, f := range fs {
			out = append(out, f.RuleID)
		}
		return out
	}
	all := crs.Unsupported(driver, limits)
	if !slices.Equal(ids(all), []int{920171, 922110, 922130, 941310}) || all[0].Driver != driver {
		t.Fatalf("full CRS findings %v, want the four listed rules", all)
	}
	if got := crs.Unsupported(wafv1alpha1.DriverWAFProxy, Limits{}); len(got) != 0 {
		t.Fatalf("findings without limits %v, want none", got)
	}

	removed := mustCompile(t, Join([]Source{{Name: "crs", Rules: crsRules},
		{Name: "tuning", Rules: "SecRuleRemoveById 920171 941300-941320\nSecRuleRemoveByTag \"attack-multipart-header\"\n"}}))
	if got := removed.Unsupported(driver, limits); len(got) != 0 {
		t.Fatalf("after removal: %v", ids(got))
	}

	schema := mustCompile(t, Join([]Source{{Name: "api", Rules: "SecRule REQUEST_BODY \"@validateSchema schema.json\" \"id:77,phase:2,deny\"\n"}},
		map[string][]byte{"schema.json": []byte(`{"type":"object"}`)}))
	f := schema.Unsupported(driver, limits)
	if len(f) != 1 || f[0].RuleID != 77 || f[0].Operator != "validateSchema" || !strings.Contains(f[0].Reason, `RuleSource "api" line 1`) {
		t.Fatalf("validateSchema findings: %v", f)
	}
}

func TestBundleIdentity(t *testing.T) {
	a := Join([]Source{{Name: "x", Rules: "SecRuleEngine On"}}, map[string][]byte{"f": []byte("1")})
	b := Join([]Source{{Name: "y", Rules: "SecRuleEngine On\n"}}, map[string][]byte{"f": []byte("1")})
	c := Join([]Source{{Name: "x", Rules: "SecRuleEngine On"}}, map[string][]byte{"f": []byte("2")})
	if a.SHA256() != b.SHA256() {
		t.Error("source names or a trailing newline changed the digest")
	}
	if a.SHA256() == c.SHA256() {
		t.Error("a data file change kept the digest")
	}
	if RevisionUUID(a.SHA256()) != RevisionUUID(b.SHA256()) || RevisionUUID(a.SHA256()) == RevisionUUID(c.SHA256()) {
		t.Error("revision ids do not follow the digest")
	}
	j := Join([]Source{{Name: "one", Rules: "a\nb\n"}, {Name: "two", Rules: "c"}, {Name: "three", Rules: "d\ne"}})
	for line, want := range map[int]string{1: "one:1", 2: "one:2", 3: "two:1", 4: "three:1", 5: "three:2", 6: ":6"} {
		if s, l := j.Locate(line); s+":"+strconv.Itoa(l) != want {
			t.Errorf("line %d -> %s:%d, want %s", line, s, l, want)
		}
	}
}

// largeRules is about n bytes of cheap rules with multi-line directives
// (continuations, a backtick block) spread through it, ids from first.
func largeRules(n, first int) string {
	var b strings.Builder
	for i := first; b.Len() < n; i++ {
		switch i % 100 {
		case 0:
			fmt.Fprintf(&b, "SecDataset d%d `\nevil%d\n`\n", i, i)
		case 1:
			fmt.Fprintf(&b, "SecRule ARGS \"@pmFromDataset d%d\" \\\n    \"id:%d,phase:2,deny,status:403\"\n", i-1, i)
		default:
			fmt.Fprintf(&b, "# rule %d\nSecRule ARGS:a%d \"@streq x\" \"id:%d,phase:2,pass,nolog,msg:'%s'\"\n", i, i, i, strings.Repeat("m", 400))
		}
	}
	return b.String()
}

// TestCompileLargeRulesInParts: rules over the chunk threshold compile in
// parts, to the same rules as one file, and errors are still located.
func TestCompileLargeRulesInParts(t *testing.T) {
	rules := largeRules(3*chunkThreshold, 1000)
	if parts := chunk(rules); len(parts) < 3 {
		t.Fatalf("%d rule files for %d bytes", len(parts), len(rules))
	}
	c := mustCompile(t, Join([]Source{{Name: "big", Rules: rules}}))
	one, err := coraza.NewWAF(coraza.NewWAFConfig().WithDirectives(rules))
	if err != nil {
		t.Fatal(err)
	}
	if want := one.(interface{ RulesCount() int }).RulesCount(); c.RuleCount != want {
		t.Fatalf("%d rules compiled in parts, %d in one file", c.RuleCount, want)
	}
	if got := status(c.WAF, "/?x=evil1000"); got != 403 {
		t.Fatalf("dataset rule: status %d, want 403", got)
	}
	b := Join([]Source{{Name: "big", Rules: rules}, {Name: "bad", Rules: "SecRule ARGS \"@rx x\" \"id:1,deny,nosuchaction\""}})
	_, err = Compile(b, Options{})
	if e, ok := AsError(err); !ok || e.Problems[0].Source != "bad" || e.Problems[0].SourceLine != 1 || !strings.Contains(err.Error(), "nosuchaction") {
		t.Fatalf("error %v", err)
	}
}

// TestCompileStopsAtDeadline: a compile whose deadline passes while it
// runs stops (at Coraza's next read of a part) and reports KindTimeout
// instead of running to the end. The deadline is a context that reports it
// has passed from its second check on: the check before Coraza starts sees
// it open, so only a compile that checks again while it runs can stop.
func TestCompileStopsAtDeadline(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, "SecRule ARGS \"@rx p-%d-(a|b)+c{2,9}[x-z]\" \"id:%d,phase:2,pass,nolog\"\n", i, 1000000+i)
	}
	ctx := &passesAfter{Context: context.Background(), open: 1}
	c, err := CompileContext(ctx, Bundle{Rules: b.String()}, Options{})
	if e, ok := AsError(err); !ok || e.Kind() != KindTimeout {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("got %v, want a timeout", err)
	}
}

// passesAfter is a context whose deadline has passed once Err has been
// called more than open times.
type passesAfter struct {
	context.Context
	open  int32
	calls atomic.Int32
}

func (c *passesAfter) Err() error {
	if c.calls.Add(1) > c.open {
		return context.DeadlineExceeded
	}
	return nil
}

// TestRegexMemoryBound: a pattern of a few bytes whose RE2 program would
// take tens of MiB (a thousand Unicode letters) fails the compile as
// TooLarge, on its rule's line, instead of costing every replica and data
// plane that memory. Without rx.MaxMemory it compiles.
func TestRegexMemoryBound(t *testing.T) {
	src := Source{Name: "tenant", Rules: "SecRuleEngine On\nSecRule ARGS \"@rx \\pL{1000}\" \"id:1,deny\"\n"}
	_, err := Compile(Join([]Source{src}), Options{})
	e, ok := AsError(err)
	if !ok || len(e.Problems) != 1 {
		t.Fatalf("got %v, want one located problem", err)
	}
	p := e.Problems[0]
	if p.Kind != KindTooLarge || p.Source != "tenant" || p.SourceLine != 2 || !strings.Contains(p.Message, "needs more memory") {
		t.Fatalf("got %+v, want TooLarge on tenant line 2 saying the pattern needs more memory", p)
	}
	t.Log(err)
}
