package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/waf/cache"
)

// routerHarness is a Router fed by a TablePoller from a real cache server,
// in front of an upstream.
type routerHarness struct {
	cache    *cacheServer
	router   *Router
	poller   *TablePoller
	upstream *upstream
	front    *httptest.Server
	logs     *logBuffer
}

func newRouterHarness(t *testing.T) *routerHarness {
	t.Helper()
	h := &routerHarness{cache: startCache(t), upstream: startUpstream(t), logs: &logBuffer{}}
	up := h.upstream.url(t)
	base := slog.New(slog.NewJSONHandler(h.logs, nil))
	h.router = &Router{
		Logger:       base,
		NewProxy:     func(l *slog.Logger) *Proxy { return &Proxy{Upstream: up, Logger: l} },
		SecurityLogs: (&SecurityLogs{Dir: t.TempDir(), Base: base.Handler()}).Open,
	}
	h.poller = &TablePoller{Client: h.cache.client, Namespace: "shop", Gateway: "gw", Target: h.router, Logger: discard()}
	h.front = httptest.NewUnstartedServer(h.router)
	h.front.Config = NewServer(h.router, DefaultServerOptions())
	h.front.Start()
	t.Cleanup(h.front.Close)
	return h
}

// publish puts t as the table of shop/gw and polls it in.
func (h *routerHarness) publish(t *testing.T, tbl *cache.Table) error {
	t.Helper()
	if _, err := h.cache.cache.PutTable("shop", "gw", tbl); err != nil {
		t.Fatal(err)
	}
	_, err := h.poller.Poll(context.Background())
	return err
}

func (h *routerHarness) do(t *testing.T, method, path string, header ...string) int {
	t.Helper()
	code, _, err := send(h.front.Client(), method, h.front.URL+path, "", header...)
	if err != nil {
		t.Fatal(err)
	}
	return code
}

func word(w string, id int) string {
	return "SecRuleEngine On\nSecRule ARGS:q \"@streq " + w + "\" \"id:" + strconv.Itoa(id) + ",phase:1,deny,status:403,log,msg:'" + w + "'\"\n"
}

func ruleSetRef(ns, name, uuid string) *cache.TableRuleSet {
	return &cache.TableRuleSet{Namespace: ns, Name: name, UUID: uuid}
}

func row(route, host string, path cache.StringMatch, policy int) cache.TableRow {
	r := cache.TableRow{Route: route, Path: &path, Policy: policy}
	if host != "" {
		r.Hostnames = []string{host}
	}
	return r
}

func prefix(p string) cache.StringMatch { return cache.StringMatch{Type: "PathPrefix", Value: p} }
func exact(p string) cache.StringMatch  { return cache.StringMatch{Type: "Exact", Value: p} }

// Each request runs the rule set of the first table row it matches: the
// admin route blocks "strict", the shop route only "base", requests no
// route matches run the Gateway's default; hostnames and exact paths are
// honoured.
func TestRouterPicksRuleSetPerRoute(t *testing.T) {
	h := newRouterHarness(t)
	base := h.cache.put("shop", "base", word("base", 1), nil)
	strict := h.cache.put("shop", "strict", word("strict", 2), nil)
	tbl := &cache.Table{Gateway: "shop/gw", Default: 0,
		Policies: []cache.TablePolicy{
			{Policy: "shop/gw-policy", RuleSet: ruleSetRef("shop", "base", base)},
			{Policy: "shop/admin-policy", RuleSet: ruleSetRef("shop", "strict", strict)},
		},
		Rows: []cache.TableRow{
			row("HTTPRoute/shop/login", "", exact("/admin/login"), 0),
			row("HTTPRoute/shop/admin", "", prefix("/admin"), 1),
			row("HTTPRoute/shop/api", "api.example.com", prefix("/"), 1),
			row("HTTPRoute/shop/shop", "", prefix("/shop"), 0),
		},
	}
	if err := h.publish(t, tbl); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		host string
		want int
	}{
		{"/admin/users?q=strict", "", 403},
		{"/admin?q=strict", "", 403},
		{"/admin/users?q=base", "", 200},
		{"/administrator?q=strict", "", 200}, // a prefix matches whole path elements
		{"/admin/login?q=strict", "", 200},   // the exact match runs the base set
		{"/admin/login?q=base", "", 403},
		{"/shop/cart?q=base", "", 403},
		{"/shop/cart?q=strict", "", 200},
		{"/elsewhere?q=base", "", 403}, // no route: the Gateway's policy
		{"/shop?q=strict", "api.example.com", 403},
		{"/shop/../admin/x?q=strict", "", 403}, // dot segments cannot reach a laxer route
		{"/shop//..//admin?q=strict", "", 403},
	}
	for _, c := range cases {
		var hdr []string
		if c.host != "" {
			hdr = []string{"Host", c.host}
		}
		if got := h.do(t, http.MethodGet, c.path, hdr...); got != c.want {
			t.Errorf("GET %s (host %q): %d, want %d", c.path, c.host, got, c.want)
		}
	}
	if got := h.do(t, http.MethodGet, "/shop%2F..%2Fadmin?q=strict"); got != http.StatusBadRequest {
		t.Errorf("encoded slash: %d, want 400", got)
	}
}

// A route whose rule set cannot be run fails closed, unless its policy
// says failOpen; a route without any policy runs no WAF.
func TestRouterFailsClosed(t *testing.T) {
	h := newRouterHarness(t)
	if got := h.do(t, http.MethodGet, "/"); got != http.StatusServiceUnavailable {
		t.Fatalf("before any table: %d, want 503", got)
	}
	base := h.cache.put("shop", "base", word("base", 1), nil)
	tbl := &cache.Table{Gateway: "shop/gw", Default: -1,
		Policies: []cache.TablePolicy{
			{Policy: "shop/denied", Unavailable: "RefNotPermitted: no ReferenceGrant"},
			{Policy: "shop/lenient", Unavailable: "FetchError: bundle storage not configured", FailOpen: true},
			{Policy: "shop/broken", RuleSet: ruleSetRef("shop", "broken", "no-such-revision")},
			{Policy: "shop/ok", RuleSet: ruleSetRef("shop", "base", base)},
		},
		Rows: []cache.TableRow{
			row("HTTPRoute/shop/a", "", prefix("/denied"), 0),
			row("HTTPRoute/shop/b", "", prefix("/lenient"), 1),
			row("HTTPRoute/shop/c", "", prefix("/broken"), 2),
			row("HTTPRoute/shop/d", "", prefix("/ok"), 3),
			row("HTTPRoute/shop/e", "", prefix("/open"), -1),
		},
	}
	if err := h.publish(t, tbl); err == nil {
		t.Fatal("a missing rule set revision was not reported")
	}
	for path, want := range map[string]int{
		"/denied": 503, "/lenient?q=base": 200, "/broken": 503, "/ok?q=base": 403, "/ok": 200, "/open?q=base": 200, "/none": 200,
	} {
		if got := h.do(t, http.MethodGet, path); got != want {
			t.Errorf("GET %s: %d, want %d", path, got, want)
		}
	}
}

// With a Default rule set (an Engine's --ruleset beside --gateway), the
// requests no policy covers run it; so do a failOpen policy's while its
// rule set is unavailable, and, under FailOpen, requests before the first
// table. A policy whose rule set is unavailable without failOpen still
// fails closed: the default is no substitute for the policy's rules.
func TestRouterDefaultRuleSet(t *testing.T) {
	h := newRouterHarness(t)
	h.router.FailOpen = true
	h.router.Default = &Proxy{Upstream: h.upstream.url(t), Logger: discard()}
	if err := h.router.Default.Load(Revision{UUID: "default", Bundle: bundle(word("deflt", 9))}); err != nil {
		t.Fatal(err)
	}
	if got := h.do(t, http.MethodGet, "/ok?q=deflt"); got != http.StatusForbidden {
		t.Errorf("FailOpen before any table: %d, want 403 from the default rule set", got)
	}
	if _, ok := h.router.Current(); ok {
		t.Error("ready before the table loaded")
	}
	base := h.cache.put("shop", "base", word("base", 1), nil)
	tbl := &cache.Table{Gateway: "shop/gw", Default: -1,
		Policies: []cache.TablePolicy{
			{Policy: "shop/denied", Unavailable: "RefNotPermitted: no ReferenceGrant"},
			{Policy: "shop/lenient", Unavailable: "FetchError: bundle storage not configured", FailOpen: true},
			{Policy: "shop/ok", RuleSet: ruleSetRef("shop", "base", base)},
		},
		Rows: []cache.TableRow{
			row("HTTPRoute/shop/a", "", prefix("/denied"), 0),
			row("HTTPRoute/shop/b", "", prefix("/lenient"), 1),
			row("HTTPRoute/shop/d", "", prefix("/ok"), 2),
			row("HTTPRoute/shop/e", "", prefix("/open"), -1),
		},
	}
	if err := h.publish(t, tbl); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{
		"/denied?q=x": 503, "/lenient?q=deflt": 403, "/lenient?q=base": 200, "/ok?q=base": 403, "/ok?q=deflt": 200,
		"/open?q=deflt": 403, "/open?q=base": 200, "/none?q=deflt": 403, "/none": 200,
	} {
		if got := h.do(t, http.MethodGet, path); got != want {
			t.Errorf("GET %s: %d, want %d", path, got, want)
		}
	}
	if uuid, ok := h.router.Current(); !ok || !strings.HasSuffix(uuid, "+default") {
		t.Errorf("Current %q %v: want the table's and the default's revisions", uuid, ok)
	}
}

// An application team's exclusions (rule ids, tags, the anomaly
// threshold) apply to its route only, on top of the real CRS.
func TestRouterExclusionsWithCRS(t *testing.T) {
	h := newRouterHarness(t)
	crs := "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nSecRuleEngine On\nInclude @owasp_crs/*.conf\n" +
		"SecRule ARGS:q \"@streq forbidden\" \"id:100001,phase:1,deny,status:403\"\n"
	id := h.cache.put("shop", "crs", crs, nil)
	rs := ruleSetRef("shop", "crs", id)
	tbl := &cache.Table{Gateway: "shop/gw", Default: 0,
		Policies: []cache.TablePolicy{
			{Policy: "shop/p", RuleSet: rs},
			{Policy: "shop/p", RuleSet: rs, Exclusions: &cache.Exclusions{Tags: []string{"attack-xss"}, RuleIDs: []int64{100001}}},
			{Policy: "shop/p", RuleSet: rs, Exclusions: &cache.Exclusions{InboundAnomalyThreshold: 10000}},
		},
		Rows: []cache.TableRow{
			row("HTTPRoute/shop/legacy", "", prefix("/legacy"), 1),
			row("HTTPRoute/shop/lax", "", prefix("/lax"), 2),
		},
	}
	if err := h.publish(t, tbl); err != nil {
		t.Fatal(err)
	}
	xss := "?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E"
	sqli := "?q=1%27%20OR%20%271%27%3D%271"
	for _, c := range []struct {
		path string
		want int
	}{
		{"/strict" + xss, 403}, {"/legacy" + xss, 200}, {"/lax" + xss, 200},
		{"/strict?q=forbidden", 403}, {"/legacy?q=forbidden", 200},
		{"/legacy" + sqli, 403}, {"/lax" + sqli, 200}, {"/strict" + sqli, 403},
	} {
		if got := h.do(t, http.MethodGet, c.path); got != c.want {
			t.Errorf("GET %s: %d, want %d", c.path, got, c.want)
		}
	}
}

// Security logs: a File destination is written inside the directory and a
// path cannot leave it.
func TestSecurityLogFile(t *testing.T) {
	dir := t.TempDir()
	s := &SecurityLogs{Dir: dir, Base: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})}
	l, err := s.Open([]cache.SecurityLog{{Name: "audit", Type: "File", Path: "waf/audit.log"}})
	if err != nil {
		t.Fatal(err)
	}
	l.Warn("waf rule matched", "rule", 1)
	data, err := os.ReadFile(filepath.Join(dir, "waf", "audit.log"))
	if err != nil || !strings.Contains(string(data), `"securityLog":"audit"`) {
		t.Fatalf("security log file: %q %v", data, err)
	}
	if _, err := s.Open([]cache.SecurityLog{{Name: "escape", Type: "File", Path: "../outside.log"}}); err == nil {
		t.Fatal("a path leaving the security log directory was opened")
	}
	if _, err := (&SecurityLogs{Base: s.Base}).Open([]cache.SecurityLog{{Name: "f", Type: "File", Path: "a.log"}}); err == nil {
		t.Fatal("a File destination without a directory was opened")
	}
}

// Exclusions reach the rules only as ids, tags of a safe alphabet and a
// number: a tag cannot smuggle a directive in.
func TestExclusionRulesRefuseInjection(t *testing.T) {
	for _, ex := range []*cache.Exclusions{
		{Tags: []string{"x\nSecRuleEngine Off"}},
		{Tags: []string{"x\" \"id:1,pass"}},
		{Tags: []string{strings.Repeat("t", 129)}},
		{Tags: []string{""}},
		{RuleIDs: []int64{0}},
		{InboundAnomalyThreshold: 20000},
	} {
		if out, err := ExclusionRules(ex); err == nil {
			t.Errorf("%+v rendered as %q", ex, out)
		}
	}
	if _, err := ExclusionRules(&cache.Exclusions{Tags: []string{strings.Repeat("t", 128), "OWASP_CRS/attack-sqli"}}); err != nil {
		t.Errorf("tags of 128 bytes and of the safe alphabet refused: %v", err)
	}
}
