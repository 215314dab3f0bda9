package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// blockEvil denies ?q=evil in phase 1.
const blockEvil = `SecRuleEngine On
SecRule ARGS:q "@streq evil" "id:100001,phase:1,deny,status:403,log,msg:'evil query'"
`

func TestBlockAndAllow(t *testing.T) {
	h := newHarness(t, nil)
	h.load(t, blockEvil)

	code, body := h.do(t, "GET", "/hello?q=good", "")
	if code != 200 || body != "hello" {
		t.Fatalf("clean request: %d %q, want 200 hello", code, body)
	}
	if h.upstream.hits.Load() != 1 {
		t.Fatalf("upstream hits %d, want 1", h.upstream.hits.Load())
	}
	code, body = h.do(t, "GET", "/hello?q=evil", "")
	if code != 403 || !strings.Contains(body, "blocked by the web application firewall") {
		t.Fatalf("attack: %d %q, want 403 and the block page", code, body)
	}
	if h.upstream.hits.Load() != 1 {
		t.Fatal("a blocked request reached the upstream")
	}
	if got := counter(t, h.metrics.Blocks.WithLabelValues("100001")); got != 1 {
		t.Errorf("blocks{rule_id=100001} = %v, want 1", got)
	}
	if got := counter(t, h.metrics.Requests.WithLabelValues("403")); got != 1 {
		t.Errorf("requests{code=403} = %v, want 1", got)
	}
	if got := counter(t, h.metrics.Requests.WithLabelValues("200")); got != 1 {
		t.Errorf("requests{code=200} = %v, want 1", got)
	}

	// One JSON line for the matched rule, with the fields operators need,
	// and the transaction id the block page names.
	matches := h.logs.lines(t, "waf rule matched")
	if len(matches) != 1 {
		t.Fatalf("want 1 matched-rule line, got %v", matches)
	}
	m := matches[0]
	rule, _ := m["rule"].(map[string]any)
	if rule["id"] != float64(100001) || rule["msg"] != "evil query" || m["client"] != "127.0.0.1" || m["uri"] != "/hello?q=evil" {
		t.Errorf("matched-rule line %v", m)
	}
	if tx, _ := m["tx"].(string); tx == "" || !strings.Contains(body, tx) {
		t.Errorf("block page %q does not name transaction %q", body, m["tx"])
	}
	if len(h.logs.lines(t, "request blocked")) != 1 {
		t.Error("want one request-blocked line")
	}
}

func TestFailurePolicyBeforeLoad(t *testing.T) {
	closed := newHarness(t, nil)
	if code, body := closed.do(t, "GET", "/?q=evil", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "No WAF rule set") {
		t.Fatalf("fail policy before load: %d %q, want 503", code, body)
	}
	if closed.upstream.hits.Load() != 0 {
		t.Fatal("fail policy let a request through")
	}
	closed.load(t, blockEvil)
	if code, _ := closed.do(t, "GET", "/?q=evil", ""); code != 403 {
		t.Fatalf("after load: %d, want 403", code)
	}

	open := newHarness(t, func(p *Proxy) { p.FailOpen = true })
	if code, body := open.do(t, "GET", "/?q=evil", ""); code != 200 || body != "hello" {
		t.Fatalf("allow policy before load: %d %q, want the upstream's 200", code, body)
	}
	open.load(t, blockEvil)
	if code, _ := open.do(t, "GET", "/?q=evil", ""); code != 403 {
		t.Fatalf("after load: %d, want 403", code)
	}
	// Close unloads: back to the failure policy.
	open.proxy.Close()
	if code, _ := open.do(t, "GET", "/?q=evil", ""); code != 200 {
		t.Fatalf("after Close with allow: %d, want 200", code)
	}
}

func TestRequestBodyInspection(t *testing.T) {
	h := newHarness(t, nil)
	h.load(t, `SecRuleEngine On
SecRequestBodyAccess On
SecRequestBodyLimit 1000
SecRequestBodyLimitAction ProcessPartial
SecRule REQUEST_HEADERS:Content-Type "@beginsWith text/plain" "id:100009,phase:1,pass,nolog,ctl:forceRequestBodyVariable=On"
SecRule REQUEST_BODY "@contains attack" "id:100010,phase:2,deny,status:406,log,msg:'body attack'"
SecRule ARGS_POST:name "@streq mallory" "id:100011,phase:2,deny,status:403,log,msg:'form field'"
`)
	if code, _ := h.do(t, "POST", "/", "some attack text", "Content-Type", "text/plain"); code != 406 {
		t.Fatalf("body attack: %d, want the rule's 406", code)
	}
	if code, _ := h.do(t, "POST", "/", "name=mallory&x=1", "Content-Type", "application/x-www-form-urlencoded"); code != 403 {
		t.Fatalf("form field: %d, want 403", code)
	}
	// A clean body reaches the upstream byte for byte, also beyond the
	// inspected part (ProcessPartial streams the rest).
	big := strings.Repeat("0123456789", 500) + "attack"
	code, echoed := h.do(t, "POST", "/", big, "Content-Type", "text/plain")
	if code != 200 || echoed != big {
		t.Fatalf("large clean body: %d, echoed %d bytes of %d", code, len(echoed), len(big))
	}
	if code, echoed := h.do(t, "POST", "/", "name=alice", "Content-Type", "application/x-www-form-urlencoded"); code != 200 || echoed != "name=alice" {
		t.Fatalf("clean form: %d %q", code, echoed)
	}
}

func TestRequestBodyLimitReject(t *testing.T) {
	h := newHarness(t, func(p *Proxy) { p.RequestBodyLimit = 100 })
	h.load(t, `SecRuleEngine On
SecRequestBodyAccess On
SecRequestBodyLimitAction Reject
`)
	if code, _ := h.do(t, "POST", "/", strings.Repeat("a", 50), "Content-Type", "text/plain"); code != 200 {
		t.Fatalf("under the --request-body-limit: %d, want 200", code)
	}
	if code, _ := h.do(t, "POST", "/", strings.Repeat("a", 500), "Content-Type", "text/plain"); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("over the --request-body-limit: %d, want 413", code)
	}
}

func TestResponseInspection(t *testing.T) {
	h := newHarness(t, nil)
	h.load(t, `SecRuleEngine On
SecResponseBodyAccess On
SecResponseBodyMimeType text/plain
SecRule RESPONSE_BODY "@contains secret-leak" "id:100020,phase:4,deny,status:502,log,msg:'leak'"
SecRule RESPONSE_STATUS "@streq 200" "chain,id:100021,phase:3,deny,status:451,log,msg:'header'"
  SecRule REQUEST_URI "@beginsWith /legal" "t:none"
`)
	code, body := h.do(t, "GET", "/", "", "X-Reply", "here is a secret-leak")
	if code != 502 || strings.Contains(body, "secret-leak") {
		t.Fatalf("leaking response: %d %q, want 502 without the leak", code, body)
	}
	if code, body := h.do(t, "GET", "/", "", "X-Reply", "all fine"); code != 200 || body != "all fine" {
		t.Fatalf("clean response: %d %q", code, body)
	}
	if code, _ := h.do(t, "GET", "/legal/x", ""); code != 451 {
		t.Fatalf("phase 3 rule: %d, want 451", code)
	}
	if got := counter(t, h.metrics.Blocks.WithLabelValues("100020")); got != 1 {
		t.Errorf("blocks{rule_id=100020} = %v, want 1", got)
	}
}

// TestResponseBodyPastLimit reads response bodies through the proxy's
// 32 KiB copy buffer: what is within SecResponseBodyLimit is inspected,
// under ProcessPartial the rest reaches the client uninspected and byte for
// byte, under Reject the response is refused.
func TestResponseBodyPastLimit(t *testing.T) {
	const limit = 50000 // more than one copy buffer, less than two
	rules := `SecRuleEngine On
SecResponseBodyAccess On
SecResponseBodyMimeType text/plain
SecResponseBodyLimit 50000
SecRule RESPONSE_BODY "@contains secret-leak" "id:100030,phase:4,deny,status:502,log,msg:'leak'"
`
	h := newHarness(t, nil)
	h.load(t, rules+"SecResponseBodyLimitAction ProcessPartial\n")
	var reply atomic.Pointer[string]
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, *reply.Load())
	})
	h.upstream.override.Store(&answer)
	get := func(body string) (int, string) {
		reply.Store(&body)
		return h.do(t, "GET", "/", "")
	}

	past := strings.Repeat("x", 3*limit) + "secret-leak" + strings.Repeat("y", 1000)
	if code, got := get(past); code != 200 || got != past {
		t.Fatalf("leak past the limit: %d, %d bytes of %d back unchanged: %v", code, len(got), len(past), got == past)
	}
	// The limit falls inside the word: its first half is inspected, the
	// whole of it reaches the client.
	straddle := strings.Repeat("x", limit-6) + "secret-leak" + strings.Repeat("y", 40000)
	if code, got := get(straddle); code != 200 || got != straddle {
		t.Fatalf("leak across the limit: %d, %d bytes of %d back unchanged: %v", code, len(got), len(straddle), got == straddle)
	}
	within := strings.Repeat("x", 40000) + "secret-leak" + strings.Repeat("y", 3*limit)
	if code, got := get(within); code != 502 || strings.Contains(got, "secret-leak") {
		t.Fatalf("leak within the limit, in the second copy buffer: %d, want 502 without the leak", code)
	}

	h.load(t, rules+"SecResponseBodyLimitAction Reject\n")
	if code, _ := get(strings.Repeat("z", 2*limit)); code != http.StatusInternalServerError {
		t.Fatalf("Reject past the limit: %d, want 500", code)
	}
	if code, got := get(strings.Repeat("z", limit-1)); code != 200 || len(got) != limit-1 {
		t.Fatalf("Reject under the limit: %d, %d bytes", code, len(got))
	}
}

func TestRedirectAndDrop(t *testing.T) {
	h := newHarness(t, nil)
	h.load(t, `SecRuleEngine On
SecRule ARGS:go "@streq away" "id:100030,phase:1,redirect:https://example.com/blocked,log"
SecRule ARGS:go "@streq drop" "id:100031,phase:1,drop,log"
`)
	client := h.front.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Get(h.front.URL + "/?go=away")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://example.com/blocked" {
		t.Fatalf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, _, err := send(h.front.Client(), "GET", h.front.URL+"/?go=drop", ""); err == nil {
		t.Fatal("drop: the connection was answered")
	}
	eventually(t, "the dropped request counted", func() bool {
		// The client may retry a GET on a fresh connection: at least one.
		return counter(t, h.metrics.Requests.WithLabelValues(codeDropped)) >= 1
	})
}

func TestUpstreamDown(t *testing.T) {
	h := newHarness(t, nil)
	h.load(t, blockEvil)
	h.upstream.Close()
	if code, body := h.do(t, "GET", "/", ""); code != http.StatusBadGateway || !strings.Contains(body, "upstream") {
		t.Fatalf("upstream down: %d %q, want 502", code, body)
	}
	if code, _ := h.do(t, "GET", "/?q=evil", ""); code != 403 {
		t.Fatalf("attack with the upstream down: %d, want 403", code)
	}
}

func TestLoadRejectsBrokenRules(t *testing.T) {
	h := newHarness(t, nil)
	good := h.load(t, blockEvil)
	err := h.proxy.Load(Revision{UUID: "broken", Bundle: bundle("SecRule ARGS \"@rx (\" \"id:1,deny\"")})
	if err == nil {
		t.Fatal("broken rules loaded")
	}
	// The sandbox applies: a rule set that reaches for host files is refused.
	err = h.proxy.Load(Revision{UUID: "escape", Bundle: bundle("Include /etc/hostname\n")})
	if err == nil || !strings.Contains(err.Error(), "/etc/hostname") {
		t.Fatalf("sandbox escape: %v", err)
	}
	if rev, _ := h.proxy.Current(); rev.UUID != good {
		t.Fatalf("in force: %q, want %q", rev.UUID, good)
	}
	if code, _ := h.do(t, "GET", "/?q=evil", ""); code != 403 {
		t.Fatalf("after a failed load: %d, want 403 from the last good rule set", code)
	}
}

func TestParseRuleSet(t *testing.T) {
	for in, want := range map[string]string{
		"ns/name": "ns/name", "a/b.c-d": "a/b.c-d",
		"": "!", "ns": "!", "/name": "!", "ns/": "!", "ns/a/b": "!", "NS/x": "!", "ns/X": "!", "a.b/c": "!",
	} {
		ns, name, err := ParseRuleSet(in)
		got := ns + "/" + name
		if err != nil {
			got = "!"
		}
		if got != want {
			t.Errorf("ParseRuleSet(%q) = %q (%v), want %q", in, got, err, want)
		}
	}
}

func TestPollerValidates(t *testing.T) {
	cs := startCache(t)
	p := &Poller{Client: cs.client, Namespace: "ns", Name: "x", Interval: 999_999_999, Target: &Proxy{}}
	if err := p.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("interval under 1s: %v", err)
	}
	p = &Poller{Interval: MinPollInterval}
	if err := p.Run(t.Context()); err == nil {
		t.Fatal("a poller without client and target ran")
	}
}

func TestInterruptionStatus(t *testing.T) {
	for _, tc := range []struct {
		action string
		status int
		want   int
	}{
		{"deny", 0, 403}, {"deny", 406, 406}, {"deny", 1000, 403}, {"deny", 101, 403},
		{"redirect", 0, 302}, {"redirect", 301, 301}, {"redirect", 403, 302},
	} {
		if got := interruptionStatus(&interruption{Action: tc.action, Status: tc.status}); got != tc.want {
			t.Errorf("%s/%d: %d, want %d", tc.action, tc.status, got, tc.want)
		}
	}
	var ie *interruptedError
	if !errors.As(error(&interruptedError{it: &interruption{RuleID: 7}}), &ie) || !strings.Contains(ie.Error(), "7") {
		t.Error("interruptedError does not name the rule")
	}
}

func TestMalformedConnect(t *testing.T) {
	h := newHarness(t, nil)
	h.load(t, "SecRuleEngine On\n")
	conn, err := net.Dial("tcp", h.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest || h.upstream.hits.Load() != 0 {
		t.Errorf("CONNECT without a port: %d, upstream hits %d; want 400 and none", resp.StatusCode, h.upstream.hits.Load())
	}
	for target, want := range map[string]bool{"example.com:443": true, "1.2.3.4:80": true, "[::1]:80": true, "example.com": false, ":80": false, "example.com:": false, "/x": false} {
		if got := validConnectTarget(target); got != want {
			t.Errorf("validConnectTarget(%q) = %v", target, got)
		}
	}
}
