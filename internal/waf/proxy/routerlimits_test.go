package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/waf/cache"
)

// costly is a path expression at cache.MaxRegexInsts whose every
// instruction stays live on "abab...": Go's regexp runs it at its full
// instructions x bytes.
const costly = `/(.*a){50}q`

func regexRow(route, host string, path string, header string) cache.TableRow {
	r := cache.TableRow{Route: route, Path: &cache.StringMatch{Type: matchRegex, Value: path}, Policy: -1}
	if host != "" {
		r.Hostnames = []string{host}
	}
	if header != "" {
		r.Path = &cache.StringMatch{Type: matchPrefix, Value: "/"}
		r.Headers = []cache.StringMatch{{Type: matchRegex, Name: "X-Match", Value: header}}
	}
	return r
}

// The audit's table: one route of 128 costly path matches. A GET with a
// 60 KB path cost 11.6 s of CPU in the router. The proxy refuses the table
// (the binding controller never serves one like it).
func TestRouterRefusesCostlyTables(t *testing.T) {
	if n, err := cache.RegexInsts(costly); err != nil || n != cache.MaxRegexInsts {
		t.Fatalf("%s: %d instructions, %v; the tests below assume %d", costly, n, err, cache.MaxRegexInsts)
	}
	tbl := &cache.Table{Gateway: "gw/shared", Default: -1}
	for range 128 {
		tbl.Rows = append(tbl.Rows, regexRow("HTTPRoute/evil/r", "evil.example.com", costly, ""))
	}
	if _, err := compileTable(tbl); !errors.Is(err, cache.ErrTableTooLarge) {
		t.Fatalf("the audit's table: %v, want ErrTableTooLarge", err)
	}
	tbl.Rows = []cache.TableRow{regexRow("HTTPRoute/evil/r", "", `/(.*a){60}q`, "")}
	if _, err := compileTable(tbl); !errors.Is(err, cache.ErrUnsupportedMatch) {
		t.Fatalf("an expression over MaxRegexInsts: %v, want ErrUnsupportedMatch", err)
	}
}

// A table at the bounds, filled with the costliest rows a request to
// evil.example.com can meet (its own, wildcard and hostless, path and
// header expressions), costs a request at the bounds at most
// MaxHostRegexInsts x MaxRequestTargetBytes regex steps; a header the
// rows match by expression past MaxRequestTargetBytes is refused before
// any expression runs over it.
func TestRouterRegexWorkBounded(t *testing.T) {
	tbl := &cache.Table{Gateway: "gw/shared", Default: -1}
	rows := []cache.TableRow{
		regexRow("HTTPRoute/evil/any", "", costly, ""),
		regexRow("HTTPRoute/evil/wild", "*.example.com", costly, ""),
		regexRow("HTTPRoute/evil/own", "evil.example.com", costly, ""),
		regexRow("HTTPRoute/evil/hdr", "evil.example.com", "", strings.TrimPrefix(costly, "/")),
		regexRow("HTTPRoute/evil/more", "evil.example.com", costly, ""),
	}
	var load cache.RegexLoad
	for _, r := range rows {
		n, _ := cache.RowInsts(r)
		if load.Add(r.Hostnames, n) == nil {
			tbl.Rows = append(tbl.Rows, r)
		}
	}
	st, err := compileTable(tbl)
	if err != nil {
		t.Fatal(err)
	}
	bound := cache.MaxHostRegexInsts * MaxRequestTargetBytes
	p := "/" + strings.Repeat("ab", MaxRequestTargetBytes/2)[:MaxRequestTargetBytes-1]
	req := httptest.NewRequest(http.MethodGet, p, nil)
	req.Host = "evil.example.com"
	req.Header.Set("X-Match", p[1:])
	if len(req.RequestURI) != MaxRequestTargetBytes {
		t.Fatalf("request target of %d bytes", len(req.RequestURI))
	}
	_, steps, err := st.pick(req, p)
	if err != nil || steps > bound || steps < bound*3/4 {
		t.Fatalf("%d rows tried for %d regex steps (%v), want at most %d and most of it", len(st.rows), steps, err, bound)
	}

	// 60 KB of header: refused, not matched.
	req.Header.Set("X-Match", strings.Repeat("ab", 30000))
	_, steps, err = st.pick(req, "/")
	var tooLong headerLimitError
	if !errors.As(err, &tooLong) || steps > bound {
		t.Fatalf("a 60 KB header matched by expression: %d regex steps, %v", steps, err)
	}
	// Two values within the bound each, past it together.
	req.Header.Set("X-Match", strings.Repeat("a", MaxRequestTargetBytes/2+1))
	req.Header.Add("X-Match", strings.Repeat("a", MaxRequestTargetBytes/2+1))
	if _, _, err := st.pick(req, "/"); !errors.As(err, &tooLong) {
		t.Fatalf("two header values past the bound together: %v", err)
	}
}

// Through the listener: a request target past MaxRequestTargetBytes is
// answered 414 before any row is tried (the audit's 60 KB path is within
// the listener's 64 KiB header limit), a header the route matches by
// expression past the bound 431; requests within the bounds are routed.
func TestRouterRefusesLongRequestTargets(t *testing.T) {
	h := newRouterHarness(t)
	tbl := &cache.Table{Gateway: "shop/gw", Default: -1, Rows: []cache.TableRow{
		regexRow("HTTPRoute/evil/r", "", costly, ""),
		regexRow("HTTPRoute/evil/h", "", "", "a+"),
	}}
	if err := h.publish(t, tbl); err != nil {
		t.Fatal(err)
	}
	at := "/" + strings.Repeat("ab", MaxRequestTargetBytes)[:MaxRequestTargetBytes-1]
	for _, c := range []struct {
		path, header string
		want         int
	}{
		{at, "", http.StatusOK},
		{at + "b", "", http.StatusRequestURITooLong},
		{"/" + strings.Repeat("ab", 30000), "", http.StatusRequestURITooLong},
		{"/x", strings.Repeat("a", MaxRequestTargetBytes), http.StatusOK},
		{"/x", strings.Repeat("a", MaxRequestTargetBytes+1), http.StatusRequestHeaderFieldsTooLarge},
	} {
		var hdr []string
		if c.header != "" {
			hdr = []string{"X-Match", c.header}
		}
		code, body, err := send(h.front.Client(), http.MethodGet, h.front.URL+c.path, "", hdr...)
		if err != nil {
			t.Fatal(err)
		}
		if code != c.want {
			t.Errorf("path of %d bytes, header of %d: %d, want %d", len(c.path), len(c.header), code, c.want)
		}
		if code == http.StatusRequestURITooLong && !strings.Contains(body, fmt.Sprint(MaxRequestTargetBytes)) {
			t.Errorf("414 body %q does not name the limit", body)
		}
	}
}

// A request repeating a header a row matches (exactly) thousands of times
// within the listener's 64 KiB cost every row that many comparisons (0.7 s
// for 16,384 rows): past MaxMatchedHeaderLines lines it is refused at the
// first row that matches on the header.
func TestRouterHeaderLinesBounded(t *testing.T) {
	tbl := &cache.Table{Gateway: "gw/shared", Default: -1}
	for i := range 64 {
		tbl.Rows = append(tbl.Rows, cache.TableRow{Route: "HTTPRoute/evil/r", Path: &cache.StringMatch{Type: matchPrefix, Value: "/"},
			Headers: []cache.StringMatch{{Type: matchExact, Name: "X-Match", Value: fmt.Sprint("v", i)}}, Policy: -1})
	}
	st, err := compileTable(tbl)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	for range MaxMatchedHeaderLines - 1 {
		req.Header.Add("X-Match", "y")
	}
	req.Header.Add("X-Match", "v63")
	if idx, _, err := st.pick(req, "/"); err != nil || idx != -1 {
		t.Fatalf("%d lines: policy %d, %v", MaxMatchedHeaderLines, idx, err)
	}
	req.Header.Add("X-Match", "y")
	var limit headerLimitError
	if _, _, err := st.pick(req, "/"); !errors.As(err, &limit) || !strings.Contains(err.Error(), "more than 16 lines") {
		t.Fatalf("%d lines: %v", MaxMatchedHeaderLines+1, err)
	}
}

// Each policy of a table is a WAF the proxy compiles and keeps: a table
// with more than cache.MaxTablePolicies does not come from the binding
// controller and is refused before any is compiled.
func TestRouterRefusesTooManyPolicies(t *testing.T) {
	tbl := &cache.Table{Gateway: "gw/shared", Default: -1}
	for i := range cache.MaxTablePolicies + 1 {
		tbl.Policies = append(tbl.Policies, cache.TablePolicy{Policy: fmt.Sprintf("a/p%d", i), Unavailable: "test"})
	}
	if _, err := compileTable(tbl); err == nil || !strings.Contains(err.Error(), "policies") {
		t.Fatalf("a table of %d policies: %v, want refused", len(tbl.Policies), err)
	}
}

// The requests the router answers itself count in
// portal_waf_proxy_requests_total by their code, as the proxies' do: a
// Gateway's 503s before its table loads and the 414s of overlong targets
// are not invisible to its dashboards.
func TestRouterCountsItsOwnAnswers(t *testing.T) {
	h := newRouterHarness(t)
	m := NewMetrics(nil)
	h.router.Metrics = m
	if code := h.do(t, http.MethodGet, "/before-any-table"); code != http.StatusServiceUnavailable {
		t.Fatalf("before a table: %d, want 503", code)
	}
	if err := h.publish(t, &cache.Table{Gateway: "shop/gw", Default: -1}); err != nil {
		t.Fatal(err)
	}
	if code := h.do(t, http.MethodGet, "/"+strings.Repeat("a", MaxRequestTargetBytes)); code != http.StatusRequestURITooLong {
		t.Fatalf("an overlong target: %d, want 414", code)
	}
	for code, want := range map[string]float64{"503": 1, "414": 1} {
		if got := counter(t, m.Requests.WithLabelValues(code)); got != want {
			t.Errorf(`portal_waf_proxy_requests_total{code=%q} = %v, want %v`, code, got, want)
		}
	}
}
