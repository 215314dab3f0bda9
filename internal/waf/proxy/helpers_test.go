package proxy

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corazawaf/coraza/v3/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/pki"
	"github.com/vilaca/portal/internal/testlog"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// cacheServer is a real rule set cache server on 127.0.0.1 serving TLS
// with a certificate of its own CA (caFile) and accepting the bearer token
// proxyToken, fed directly.
type cacheServer struct {
	cache  *cache.Cache
	server *httptest.Server
	client *cache.Client
	// caFile holds the CA the server's certificate chains to.
	caFile string
}

// proxyToken is the one token the test cache servers accept.
const proxyToken = "proxy-token"

func startCache(t *testing.T) *cacheServer {
	t.Helper()
	return startCacheWith(t, nil)
}

// startCacheWith is startCache whose handler is wrapped by wrap (nil: none),
// for a server that tampers with what it serves.
func startCacheWith(t *testing.T, wrap func(http.Handler) http.Handler) *cacheServer {
	t.Helper()
	c := cache.New(nil, nil)
	allow := cache.AuthorizerFunc(func(_ context.Context, token, _, _ string) (cache.Decision, error) {
		if token != proxyToken {
			return cache.Decision{Reason: cache.DenyUnauthenticated}, nil
		}
		return cache.Decision{Allowed: true}, nil
	})
	var h http.Handler = cache.NewServer(c, cache.ServerOptions{Logger: discard(), Authorizer: allow}, nil).Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv, caFile := startTLS(t, h)
	transport, err := cache.NewCATransport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	client, err := cache.NewClient(srv.URL, &http.Client{Transport: transport, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	client.Token = func() (string, error) { return proxyToken, nil }
	return &cacheServer{cache: c, server: srv, client: client, caFile: caFile}
}

// startTLS serves h over TLS with a certificate for 127.0.0.1 from a new CA
// of its own, and returns the server and a file holding that CA.
func startTLS(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	b, err := pki.NewSelfSigned(time.Now(), time.Hour, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*b.Serving}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, b.CABundle(), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, caFile
}

// put stores rules as the latest revision of ns/name, with the uuid the
// controller would give it, and returns that uuid.
func (cs *cacheServer) put(ns, name, rules string, files map[string][]byte) string {
	id := ruleset.RevisionUUID(ruleset.Bundle{Rules: rules, DataFiles: files}.SHA256())
	cs.cache.Put(cache.Key(ns, name), id, rules, files)
	return id
}

// upstream is an httptest server that answers 200 with the request body
// (or "hello" when there is none) and counts requests. A response-body
// header X-Reply asks it to answer with that text instead.
type upstream struct {
	*httptest.Server
	hits atomic.Int64
	// override, when set, answers instead.
	override atomic.Pointer[http.HandlerFunc]
}

func startUpstream(t testing.TB) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		if h := u.override.Load(); h != nil {
			(*h)(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		switch {
		case r.Header.Get("X-Reply") != "":
			_, _ = io.WriteString(w, r.Header.Get("X-Reply"))
		case len(body) > 0:
			_, _ = w.Write(body)
		default:
			_, _ = io.WriteString(w, "hello")
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) url(t testing.TB) *url.URL {
	t.Helper()
	parsed, err := url.Parse(u.URL)
	if err != nil {
		t.Fatal(err)
	}
	return parsed
}

// logBuffer collects JSON log lines; safe for concurrent use.
type logBuffer struct{ testlog.Buffer }

// lines returns the decoded log lines whose msg is msg.
func (l *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// harness is a proxy in front of an upstream, with its own metrics and a
// log buffer, served on 127.0.0.1.
type harness struct {
	proxy    *Proxy
	upstream *upstream
	front    *httptest.Server
	logs     *logBuffer
	reg      *prometheus.Registry
	metrics  *Metrics
}

func newHarness(t testing.TB, configure func(*Proxy)) *harness {
	t.Helper()
	h := &harness{upstream: startUpstream(t), logs: &logBuffer{}, reg: prometheus.NewRegistry()}
	h.metrics = NewMetrics(h.reg)
	h.proxy = &Proxy{
		Upstream: h.upstream.url(t),
		Logger:   slog.New(slog.NewJSONHandler(h.logs, nil)),
		Metrics:  h.metrics,
	}
	if configure != nil {
		configure(h.proxy)
	}
	h.front = httptest.NewUnstartedServer(h.proxy)
	h.front.Config = NewServer(h.proxy, DefaultServerOptions())
	h.front.Start()
	t.Cleanup(func() {
		h.front.Close()
		h.proxy.Close()
	})
	return h
}

// load compiles rules into the proxy directly.
func (h *harness) load(t *testing.T, rules string) string {
	t.Helper()
	id := ruleset.RevisionUUID(ruleset.Bundle{Rules: rules}.SHA256())
	if err := h.proxy.Load(Revision{UUID: id, Bundle: ruleset.Bundle{Rules: rules}}); err != nil {
		t.Fatal(err)
	}
	return id
}

// do sends a request through the proxy and returns status and body.
func (h *harness) do(t *testing.T, method, path, body string, header ...string) (int, string) {
	t.Helper()
	code, got, err := send(h.front.Client(), method, h.front.URL+path, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return code, got
}

func send(c *http.Client, method, u, body string, header ...string) (int, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		return 0, "", err
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func counter(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// eventually polls cond every 10 ms until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

type interruption = types.Interruption

func bundle(rules string) ruleset.Bundle { return ruleset.Bundle{Rules: rules} }
