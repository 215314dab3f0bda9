package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/waf/cache"
)

// An impostor on the path to the cache, serving `SecRuleEngine Off` under a
// certificate of another CA, is refused: the poll fails on the TLS
// handshake and the last good WAF keeps blocking. Once the CA file holds
// the impostor's CA (a real CA rotation rewrites the file), the next poll
// trusts it without a restart.
func TestPollerVerifiesCacheCA(t *testing.T) {
	cs, h := startCache(t), newHarness(t, nil)
	good := cs.put("ns", "guard", revisionRules(1), nil)
	if _, err := newPoller(cs, h).Poll(t.Context()); err != nil {
		t.Fatal(err)
	}

	impostor := startCache(t)
	impostor.put("ns", "guard", "SecRuleEngine Off\n", nil)
	caFile := cs.caFile
	transport, err := cache.NewCATransport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	client, err := cache.NewClient(impostor.server.URL, &http.Client{Transport: transport, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	client.Token = func() (string, error) { return proxyToken, nil }
	p := &Poller{Client: client, Namespace: "ns", Name: "guard", Interval: MinPollInterval, Target: h.proxy, Logger: discard(), Metrics: h.metrics}
	if _, err := p.Poll(t.Context()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("poll of a server with another CA: %v, want a certificate error", err)
	}
	if rev, _ := h.proxy.Current(); rev.UUID != good {
		t.Fatalf("in force %s, want the last good %s", rev.UUID, good)
	}
	if code, _ := h.do(t, "GET", "/?q=evil", ""); code != 403 {
		t.Fatalf("after the impostor: %d, want 403", code)
	}
	if got := counter(t, h.metrics.ReloadFailures.WithLabelValues(FailureFetch)); got != 1 {
		t.Errorf("fetch failures = %v, want 1", got)
	}

	impostorCA, err := os.ReadFile(impostor.caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, impostorCA, 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := p.Poll(t.Context()); err != nil || !changed {
		t.Fatalf("after the CA file changed: changed %v, %v", changed, err)
	}
}

// A cache answer whose body does not have the sha256 /latest announced is
// not compiled: the last good WAF stays and the failure is counted as
// digest.
func TestPollerVerifiesDigest(t *testing.T) {
	var tamper atomic.Bool
	cs := startCacheWith(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !tamper.Load() || strings.HasSuffix(r.URL.Path, "/latest") {
				next.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			body := bytes.ReplaceAll(rec.Body.Bytes(), []byte("SecRuleEngine On"), []byte("SecRuleEngine Off"))
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body)
		})
	})
	h := newHarness(t, nil)
	p := newPoller(cs, h)
	good := cs.put("ns", "guard", revisionRules(1), nil)
	if _, err := p.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	cs.put("ns", "guard", revisionRules(2), nil)
	tamper.Store(true)
	if _, err := p.Poll(t.Context()); !errors.Is(err, cache.ErrDigestMismatch) {
		t.Fatalf("poll of a tampered entry: %v, want ErrDigestMismatch", err)
	}
	if rev, _ := h.proxy.Current(); rev.UUID != good {
		t.Fatalf("in force %s, want the last good %s", rev.UUID, good)
	}
	if code, _ := h.do(t, "GET", "/?q=evil", ""); code != 403 {
		t.Fatalf("after a tampered entry: %d, want 403", code)
	}
	if got := counter(t, h.metrics.ReloadFailures.WithLabelValues(FailureDigest)); got != 1 {
		t.Errorf("digest failures = %v, want 1", got)
	}
	tamper.Store(false)
	if changed, err := p.Poll(t.Context()); err != nil || !changed {
		t.Fatalf("untampered again: changed %v, %v", changed, err)
	}
}

// The proxy's request body cap holds whatever the rule set does to raise
// it: SecRequestBodyLimit, SecRequestBodyInMemoryLimit,
// ctl:requestBodyLimit, ProcessPartial, or the engine switched off. The
// client gets 413 and the upstream never more than the cap (a chunked body
// streamed uninspected is cut there); a body within the cap arrives intact.
func TestRequestBodyCap(t *testing.T) {
	const limit = 4096
	raise := "SecRuleEngine On\nSecRequestBodyAccess On\nSecRequestBodyLimit 1000000000\n" +
		"SecRequestBodyInMemoryLimit 1000000000\nSecRequestBodyLimitAction ProcessPartial\n" +
		"SecRule REQUEST_METHOD \"@rx .\" \"id:100300,phase:1,pass,nolog,ctl:requestBodyLimit=1000000000\"\n"
	for name, rules := range map[string]string{"raised": raise, "engine off": "SecRuleEngine Off\n"} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, func(p *Proxy) { p.MaxRequestBodyBytes = limit })
			h.load(t, rules)
			var most atomic.Int64
			record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				_, _ = w.Write(body)
				if n := int64(len(body)); n > most.Load() {
					most.Store(n)
				}
			})
			h.upstream.override.Store(&record)
			big := strings.Repeat("a", 4*limit)
			if code, _ := h.do(t, "POST", "/", big, "Content-Type", "text/plain"); code != http.StatusRequestEntityTooLarge {
				t.Fatalf("body of %d bytes with Content-Length: %d, want 413", len(big), code)
			}
			// Chunked: no Content-Length, the cap trips while reading.
			req, err := http.NewRequest("POST", h.front.URL+"/", io.MultiReader(strings.NewReader(big)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "text/plain")
			resp, err := h.front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("chunked body of %d bytes: %d, want 413", len(big), resp.StatusCode)
			}
			if n := most.Load(); n > limit {
				t.Fatalf("the upstream received a body of %d bytes, above the cap of %d", n, limit)
			}
			small := strings.Repeat("b", limit)
			if code, body := h.do(t, "POST", "/", small, "Content-Type", "text/plain"); code != 200 || body != small {
				t.Fatalf("body within the cap: %d, %d bytes back", code, len(body))
			}
		})
	}
}
