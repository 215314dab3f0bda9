package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// teamA is a unit-test Authorizer: token "team-a" reads namespace team-a,
// token "team-b" is valid but reads nothing of team-a, anything else is not
// a valid token. The real one (KubeAuthorizer) is tested against the API
// server in internal/waf.
var teamA = AuthorizerFunc(func(_ context.Context, token, ns, _ string) (Decision, error) {
	switch {
	case token == "team-a" && ns == "team-a":
		return Decision{Allowed: true, User: "system:serviceaccount:team-a:proxy"}, nil
	case token == "team-a" || token == "team-b":
		return Decision{Reason: DenyForbidden, User: "system:serviceaccount:" + token + ":proxy"}, nil
	case token == "broken":
		return Decision{}, errors.New("API server unreachable")
	}
	return Decision{Reason: DenyUnauthenticated}, nil
})

func testServer(t *testing.T) (*Cache, *Metrics, *httptest.Server) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	c := New(clocktesting.NewFakePassiveClock(t0), m)
	c.Put("team-a/crs", "11111111-2222-5333-8444-555555555555", "SecRuleEngine On\n", map[string][]byte{"words.txt": []byte("evil\n")})
	c.Put("team-a/plain", "66666666-2222-5333-8444-555555555555", "SecRuleEngine Off\n", nil)
	srv := httptest.NewTLSServer(NewServer(c, ServerOptions{Authorizer: teamA, Logger: discardLog()}, m).Handler())
	t.Cleanup(srv.Close)
	client = srv.Client()
	return c, m, srv
}

// client is the client of the last testServer (it trusts its certificate).
var client *http.Client

func do(t *testing.T, method, url string, body io.Reader) (*http.Response, string) {
	t.Helper()
	return doAs(t, "team-a", method, url, body)
}

func doAs(t *testing.T, token, method, url string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(data)
}

func TestServerEntryShapes(t *testing.T) {
	_, _, srv := testServer(t)
	resp, body := do(t, http.MethodGet, srv.URL+"/rules/team-a/crs", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 4 || raw["uuid"] != "11111111-2222-5333-8444-555555555555" || raw["timestamp"] != "2026-01-02T03:04:05Z" ||
		raw["rules"] != "SecRuleEngine On\n" || raw["dataFiles"].(map[string]any)["words.txt"] != "ZXZpbAo=" {
		t.Fatalf("entry %s", body)
	}
	_, body = do(t, http.MethodGet, srv.URL+"/rules/team-a/plain", nil)
	if strings.Contains(body, "dataFiles") {
		t.Fatalf("empty dataFiles not omitted: %s", body)
	}
	_, entry := do(t, http.MethodGet, srv.URL+"/rules/team-a/crs", nil)
	sum := sha256.Sum256([]byte(entry))
	_, body = do(t, http.MethodGet, srv.URL+"/rules/team-a/crs/latest", nil)
	if body != `{"uuid":"11111111-2222-5333-8444-555555555555","timestamp":"2026-01-02T03:04:05Z","sha256":"`+hex.EncodeToString(sum[:])+`"}` {
		t.Fatalf("latest %s", body)
	}
	resp, body = do(t, http.MethodHead, srv.URL+"/rules/team-a/crs/latest", nil)
	if resp.StatusCode != 200 || body != "" || resp.ContentLength <= 0 {
		t.Fatalf("HEAD: %d %q %d", resp.StatusCode, body, resp.ContentLength)
	}
}

func TestServerStatusCodes(t *testing.T) {
	_, m, srv := testServer(t)
	cases := []struct {
		method, path string
		body         io.Reader
		want         int
	}{
		{"GET", "/rules/team-a/crs", nil, 200},
		{"GET", "/rules/team-a/crs/latest", nil, 200},
		{"GET", "/rules/team-a/missing", nil, 404},
		{"GET", "/rules/team-b/crs/latest", nil, 403},
		{"GET", "/", nil, 404},
		{"GET", "/metrics", nil, 404},
		{"GET", "/rulesets/team-a/crs", nil, 404},
		{"POST", "/rules/team-a/crs", nil, 405},
		{"PUT", "/rules/team-a/crs", strings.NewReader("x"), 405},
		{"DELETE", "/rules/team-a/crs/latest", nil, 405},
		{"GET", "/rules/team-a/crs", strings.NewReader("body"), 413},
		{"GET", "/rules", nil, 400},
		{"GET", "/rules/", nil, 400},
		{"GET", "/rules/team-a", nil, 400},
		{"GET", "/rules/team-a/", nil, 400},
		{"GET", "/rules/team-a/crs/", nil, 400},
		{"GET", "/rules/team-a/crs/earliest", nil, 400},
		{"GET", "/rules/team-a/crs/latest/x", nil, 400},
		{"GET", "/rules/Team-A/crs", nil, 400},
		{"GET", "/rules/team-a/CRS", nil, 400},
		{"GET", "/rules/team-a/..", nil, 400},
		{"GET", "/rules/team-a/cr%2Fs", nil, 400},
		{"GET", "/rules/" + strings.Repeat("a", 64) + "/crs", nil, 400},
	}
	for _, tc := range cases {
		resp, body := do(t, tc.method, srv.URL+tc.path, tc.body)
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: %d %q, want %d", tc.method, tc.path, resp.StatusCode, body, tc.want)
		}
		if tc.want == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q", tc.method, tc.path, resp.Header.Get("Allow"))
		}
	}
	if got := testutil.ToFloat64(m.Requests.WithLabelValues("400")); got != 12 {
		t.Errorf("requests_total{code=400} = %v, want 12", got)
	}
	if got := testutil.CollectAndCount(m.Duration); got != 1 {
		t.Errorf("duration histogram series %d", got)
	}
}

// TestServerRunnable starts the server as the manager would, reads it with
// the client, checks the header limit, runs the garbage collector from a
// fake ticker, and stops it.
func TestServerRunnable(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	c := New(clk, nil)
	c.Put("ns/rs", "old", "SecRuleEngine Off\n", nil)
	clk.SetTime(t0.Add(48 * time.Hour))
	c.Put("ns/rs", "new", "SecRuleEngine On\n", nil)
	tlsSrv := httptest.NewTLSServer(nil) // for its certificate and a client that trusts it
	tlsSrv.Close()
	cert := tlsSrv.TLS.Certificates[0]
	s := NewServer(c, ServerOptions{
		Addr: "127.0.0.1:0", GCInterval: time.Minute, Clock: clk, Logger: discardLog(),
		Authorizer:     AuthorizerFunc(func(context.Context, string, string, string) (Decision, error) { return Decision{Allowed: true}, nil }),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil },
	}, nil)
	if s.NeedLeaderElection() {
		t.Fatal("the cache server must run on every replica")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	<-s.Ready()
	if resp, err := http.Get("http://" + s.Addr() + "/rules/ns/rs"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP: %d, want Go's 400 for HTTP to an HTTPS server", resp.StatusCode)
		}
	}
	cl, err := NewClient("https://"+s.Addr(), tlsSrv.Client())
	if err != nil {
		t.Fatal(err)
	}
	cl.Token = func() (string, error) { return "any", nil }
	if l, err := cl.Latest(ctx, "ns", "rs"); err != nil || l.UUID != "new" {
		t.Fatalf("latest %+v %v", l, err)
	}
	if e, err := cl.Entry(ctx, "ns", "rs"); err != nil || e.Rules != "SecRuleEngine On\n" {
		t.Fatalf("entry %+v %v", e, err)
	}
	if _, err := cl.Latest(ctx, "ns", "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing rule set: %v", err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://"+s.Addr()+"/rules/ns/rs", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 2*MaxHeaderBytes))
	if resp, err := tlsSrv.Client().Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized headers: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		clk.Step(time.Minute) // fires the GC ticker once its goroutine waits on it
		return c.Revisions("ns/rs") == 1, nil
	})
	if err != nil {
		t.Fatalf("GC did not evict the old revision: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start returned %v", err)
	}
}

func TestServerListenError(t *testing.T) {
	cert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errors.New("none") }
	s := NewServer(New(nil, nil), ServerOptions{Addr: "127.0.0.1:-1", GetCertificate: cert}, nil)
	if err := s.Start(context.Background()); err == nil {
		t.Fatal("Start listened on port -1")
	}
	s = NewServer(New(nil, nil), ServerOptions{Addr: "127.0.0.1:0"}, nil)
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "no serving certificate") {
		t.Fatalf("Start without a certificate: %v", err)
	}
}

// TestServerAuthorization: a request needs a bearer token the Authorizer
// accepts for the rule set; refusals say why (401 or 403), count by reason,
// and never tell whether another namespace's rule set exists.
func TestServerAuthorization(t *testing.T) {
	_, m, srv := testServer(t)
	cases := []struct {
		token, path string
		want        int
		reason      string
	}{
		{"", "/rules/team-a/crs", 401, DenyNoToken},
		{"forged", "/rules/team-a/crs", 401, DenyUnauthenticated},
		{"team-b", "/rules/team-a/crs", 403, DenyForbidden},
		{"team-b", "/rules/team-a/missing", 403, DenyForbidden},
		{"team-a", "/rules/team-b/crs", 403, DenyForbidden},
		{"broken", "/rules/team-a/crs", 503, DenyReviewFailed},
		{"team-a", "/rules/team-a/crs", 200, ""},
	}
	for _, tc := range cases {
		resp, body := doAs(t, tc.token, http.MethodGet, srv.URL+tc.path, nil)
		if resp.StatusCode != tc.want {
			t.Errorf("token %q %s: %d %q, want %d", tc.token, tc.path, resp.StatusCode, body, tc.want)
		}
		if tc.want == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("token %q: 401 without a Bearer challenge", tc.token)
		}
		if tc.want == 200 && !strings.Contains(body, "SecRuleEngine On") {
			t.Errorf("allowed read: %q", body)
		}
	}
	for reason, want := range map[string]float64{DenyNoToken: 1, DenyUnauthenticated: 1, DenyForbidden: 3, DenyReviewFailed: 1} {
		if got := testutil.ToFloat64(m.Denied.WithLabelValues(reason)); got != want {
			t.Errorf("denied_total{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	// Without an Authorizer the server refuses everything.
	bare := httptest.NewTLSServer(NewServer(New(nil, nil), ServerOptions{Logger: discardLog()}, nil).Handler())
	defer bare.Close()
	client = bare.Client()
	if resp, _ := doAs(t, "team-a", http.MethodGet, bare.URL+"/rules/team-a/crs", nil); resp.StatusCode != 503 {
		t.Fatalf("no authorizer: %d, want 503", resp.StatusCode)
	}
}

// TestServerConcurrencyBound: with MaxConcurrent requests in flight, the
// next one gets 503 with Retry-After at once instead of queueing.
func TestServerConcurrencyBound(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	blocking := AuthorizerFunc(func(ctx context.Context, _, _, _ string) (Decision, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return Decision{Allowed: true}, nil
	})
	m := NewMetrics(prometheus.NewRegistry())
	c := New(nil, m)
	c.Put("ns/rs", "id", "SecRuleEngine On\n", nil)
	srv := httptest.NewTLSServer(NewServer(c, ServerOptions{Authorizer: blocking, MaxConcurrent: 2, Logger: discardLog()}, m).Handler())
	defer srv.Close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before Close, which waits for the handlers
	client = srv.Client()
	// Without the bound the third request would wait for the first two.
	client.Timeout = 10 * time.Second
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			resp, _ := doAs(t, "x", http.MethodGet, srv.URL+"/rules/ns/rs", nil)
			codes <- resp.StatusCode
		})
	}
	<-entered
	<-entered
	resp, _ := doAs(t, "x", http.MethodGet, srv.URL+"/rules/ns/rs", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("request beyond the bound: %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	unblock()
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != 200 {
			t.Fatalf("request within the bound: %d", code)
		}
	}
	if got := testutil.ToFloat64(m.Denied.WithLabelValues(DenyOverloaded)); got != 1 {
		t.Fatalf("denied_total{reason=overloaded} = %v, want 1", got)
	}
}

// TestServerLogsDenials: every refusal is one log line naming the reason,
// the path, the client and, when the token authenticated, the user.
func TestServerLogsDenials(t *testing.T) {
	var buf bytes.Buffer
	c := New(nil, nil)
	c.Put("team-a/crs", "id", "SecRuleEngine On\n", nil)
	srv := httptest.NewTLSServer(NewServer(c, ServerOptions{Authorizer: teamA, Logger: slog.New(slog.NewJSONHandler(&buf, nil))}, nil).Handler())
	defer srv.Close()
	client = srv.Client()
	doAs(t, "team-b", http.MethodGet, srv.URL+"/rules/team-a/crs", nil)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	if line["msg"] != "rule set cache request denied" || line["reason"] != DenyForbidden || line["path"] != "/rules/team-a/crs" ||
		line["user"] != "system:serviceaccount:team-b:proxy" || line["client"] == "" {
		t.Fatalf("log line %v", line)
	}
}

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// TestServerEncodesOnce: answering a large entry allocates far less than
// the entry, because the server writes the bytes encoded when the revision
// was stored instead of encoding it per request.
func TestServerEncodesOnce(t *testing.T) {
	const size = 1 << 20
	c := New(nil, nil)
	c.Put("team-a/big", "id", strings.Repeat("# padding\n", size/10), map[string][]byte{"data.txt": make([]byte, size)})
	h := NewServer(c, ServerOptions{Authorizer: teamA, Logger: discardLog()}, nil).Handler()
	req := httptest.NewRequest(http.MethodGet, "/rules/team-a/big", nil)
	req.Header.Set("Authorization", "Bearer team-a")
	const requests = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range requests {
		h.ServeHTTP(&discardWriter{h: http.Header{}}, req)
	}
	runtime.ReadMemStats(&after)
	if perRequest := (after.TotalAlloc - before.TotalAlloc) / requests; perRequest > size/8 {
		t.Fatalf("%d bytes allocated per answer of a %d-byte entry: it is encoded per request", perRequest, 2*size)
	}
}
