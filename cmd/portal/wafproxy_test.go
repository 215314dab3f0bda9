package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/pki"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/proxy"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// testCache is a rule set cache served over TLS by a certificate of its own
// CA, accepting one token; caFile and tokenFile are what the waf-proxy is
// given.
type testCache struct {
	cache             *cache.Cache
	url               string
	caFile, tokenFile string
}

func startTestCache(t *testing.T) *testCache {
	t.Helper()
	dir := t.TempDir()
	tc := &testCache{cache: cache.New(nil, nil), caFile: filepath.Join(dir, "ca.crt"), tokenFile: filepath.Join(dir, "token")}
	allow := cache.AuthorizerFunc(func(_ context.Context, token, _, _ string) (cache.Decision, error) {
		if token != "proxy-token" {
			return cache.Decision{Reason: cache.DenyUnauthenticated}, nil
		}
		return cache.Decision{Allowed: true}, nil
	})
	b, err := pki.NewSelfSigned(time.Now(), time.Hour, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(cache.NewServer(tc.cache, cache.ServerOptions{Authorizer: allow}, nil).Handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*b.Serving}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tc.url = srv.URL
	if err := errors.Join(os.WriteFile(tc.caFile, b.CABundle(), 0o600), os.WriteFile(tc.tokenFile, []byte("proxy-token\n"), 0o600)); err != nil {
		t.Fatal(err)
	}
	return tc
}

func TestWAFProxyFlagErrors(t *testing.T) {
	tc := startTestCache(t)
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"waf-proxy", "--cache-url", tc.url, "--ruleset", "ns/guard", "--upstream", "http://127.0.0.1:2",
		"--ca-file", tc.caFile, "--token-file", tc.tokenFile}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"waf-proxy"}, "--cache-url is required"},
		{[]string{"waf-proxy", "--cache-url", "http://x"}, "--ruleset is required"},
		{append(base, "--poll-interval", "500ms"), "--poll-interval 500ms is too short: the minimum is 1s"},
		{append(base, "--failure-policy", "open"), `--failure-policy "open": use fail or allow`},
		{append(base, "--ruleset", "guard"), "want namespace/name"},
		{append(base, "--ruleset", "ns/Guard"), "name"},
		{append(base, "--gateway", "edge"), "--gateway: "},
		{append(base, "--upstream", "ftp://x"), "--upstream"},
		{append(base, "--cache-url", "nope"), "--cache-url"},
		{append(base, "--cache-url", "http://127.0.0.1:1"), "the rule set cache serves TLS only"},
		{append(base, "--ca-file", "/nonexistent/ca.crt"), "--ca-file"},
		{append(base, "--ca-file", tc.tokenFile), "holds no PEM certificate"},
		{append(base, "--token-file", "/nonexistent/token"), "--token-file"},
		{append(base, "--token-file", empty), "is empty"},
		{append(base, "--max-request-body-bytes", "0"), "--max-request-body-bytes must be positive"},
		{append(base, "--max-response-body-bytes", "0"), "--max-response-body-bytes must be positive"},
		{append(base, "--response-body-limit", "2097152"), "is above --max-response-body-bytes"},
		{append(base, "--request-body-limit", "-1"), "must not be negative"},
		{append(base, "--log-level", "loud"), "--log-level"},
	} {
		_, err := runCLI(t, "", tc.args...)
		if code := exitCodeOf(err); code != exitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: exit %d, error %v; want exit %d and %q", tc.args[1:], code, err, exitUsage, tc.want)
		}
	}
}

// TestWAFProxyCommand runs the command against a real cache server and an
// upstream: 503 and not ready before the rule set exists, then blocking,
// metrics and a clean shutdown.
func TestWAFProxyCommand(t *testing.T) {
	tc := startTestCache(t)
	c := tc.cache
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "upstream") }))
	defer up.Close()

	addrs := make(chan [2]string, 1)
	o := &wafProxyOptions{
		cacheURL: tc.url, caFile: tc.caFile, tokenFile: tc.tokenFile,
		maxRequestBody: proxy.DefaultMaxRequestBodyBytes, maxResponseBody: proxy.DefaultMaxResponseBodyBytes,
		ruleSet: "ns/guard", upstream: up.URL, listen: "127.0.0.1:0", metricsAddr: "127.0.0.1:0",
		failurePolicy: "fail", logLevel: "error", pollInterval: time.Second, server: proxy.DefaultServerOptions(),
		ready: func(listen, metrics string) { addrs <- [2]string{listen, metrics} },
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- o.run(ctx) }()
	a := <-addrs
	front, ops := "http://"+a[0], "http://"+a[1]

	if code, _ := get(t, front+"/"); code != http.StatusServiceUnavailable {
		t.Fatalf("before any rule set: %d, want 503", code)
	}
	if code, _ := get(t, ops+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before any rule set: %d, want 503", code)
	}
	rules := "SecRuleEngine On\nSecRule ARGS:q \"@streq evil\" \"id:100001,phase:1,deny,status:403\"\n"
	c.Put(cache.Key("ns", "guard"), ruleset.RevisionUUID(ruleset.Bundle{Rules: rules}.SHA256()), rules, nil)
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		code, _ := get(t, ops+"/readyz")
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("rule set not loaded: %v", err)
	}
	if code, body := get(t, front+"/?q=good"); code != 200 || body != "upstream" {
		t.Fatalf("clean request: %d %q", code, body)
	}
	if code, _ := get(t, front+"/?q=evil"); code != 403 {
		t.Fatalf("attack: %d, want 403", code)
	}
	_, metrics := get(t, ops+"/metrics")
	for _, want := range []string{`portal_waf_proxy_requests_total{code="403"} 1`, `portal_waf_proxy_blocks_total{rule_id="100001"} 1`, "portal_waf_proxy_reloads_total 1", "portal_waf_proxy_ruleset_revision{uuid="} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestWAFProxyGatewayWithDefaultRuleSet runs the command as an Engine's
// waf-proxy does, --gateway and --ruleset together, against a real cache
// server, with the real CRS as the default: the route a policy covers runs
// the policy's rule set (a word filter CRS would let through), the route no
// policy covers, and a path no route matches, run CRS.
func TestWAFProxyGatewayWithDefaultRuleSet(t *testing.T) {
	tc := startTestCache(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "upstream") }))
	defer up.Close()

	crs := "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nSecRuleEngine On\nInclude @owasp_crs/*.conf\n"
	strict := "SecRuleEngine On\nSecRule ARGS:q \"@streq forbidden\" \"id:100002,phase:1,deny,status:403\"\n"
	put := func(name, rules string) string {
		uuid := ruleset.RevisionUUID(ruleset.Bundle{Rules: rules}.SHA256())
		tc.cache.Put(cache.Key("shop", name), uuid, rules, nil)
		return uuid
	}
	put("engine-default", crs)
	strictUUID := put("strict", strict)
	if _, err := tc.cache.PutTable("shop", "edge", &cache.Table{
		Gateway:  "shop/edge",
		Policies: []cache.TablePolicy{{Policy: "shop/strict", RuleSet: &cache.TableRuleSet{Namespace: "shop", Name: "strict", UUID: strictUUID}}},
		Rows: []cache.TableRow{
			{Route: "HTTPRoute/shop/checkout", Path: &cache.StringMatch{Type: "PathPrefix", Value: "/checkout"}, Policy: 0},
			{Route: "HTTPRoute/shop/catalog", Path: &cache.StringMatch{Type: "PathPrefix", Value: "/catalog"}, Policy: -1},
		},
		Default: -1,
	}); err != nil {
		t.Fatal(err)
	}

	addrs := make(chan [2]string, 1)
	o := &wafProxyOptions{
		cacheURL: tc.url, caFile: tc.caFile, tokenFile: tc.tokenFile,
		maxRequestBody: proxy.DefaultMaxRequestBodyBytes, maxResponseBody: proxy.DefaultMaxResponseBodyBytes,
		gateway: "shop/edge", ruleSet: "shop/engine-default", upstream: up.URL, listen: "127.0.0.1:0", metricsAddr: "127.0.0.1:0",
		failurePolicy: "fail", logLevel: "error", pollInterval: time.Second, server: proxy.DefaultServerOptions(),
		ready: func(listen, metrics string) { addrs <- [2]string{listen, metrics} },
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- o.run(ctx) }()
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatalf("waf-proxy --gateway --ruleset did not start: %v", err)
	}
	front, ops := "http://"+a[0], "http://"+a[1]
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		code, _ := get(t, ops+"/readyz")
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("table and default rule set not loaded: %v", err)
	}
	xss := "?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E"
	for _, c := range []struct {
		path string
		want int
		why  string
	}{
		{"/checkout?q=forbidden", http.StatusForbidden, "the policy's rule set"},
		{"/checkout" + xss, http.StatusOK, "the policy's rule set, not CRS"},
		{"/catalog" + xss, http.StatusForbidden, "no policy: the Engine's CRS"},
		{"/catalog?q=forbidden", http.StatusOK, "no policy: CRS, not the policy's rule set"},
		{"/elsewhere" + xss, http.StatusForbidden, "no route: the Engine's CRS"},
		{"/catalog/item?q=shoes", http.StatusOK, "clean request"},
	} {
		if code, _ := get(t, front+c.path); code != c.want {
			t.Errorf("GET %s: %d, want %d (%s)", c.path, code, c.want, c.why)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
