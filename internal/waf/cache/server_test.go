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
	"strconv"
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

// blockedWriter is a client that reads nothing: the answer's body blocks
// until release is closed, after saying that it began.
type blockedWriter struct {
	*httptest.ResponseRecorder
	writing chan<- struct{}
	release <-chan struct{}
}

func (w blockedWriter) Write(b []byte) (int, error) {
	w.writing <- struct{}{}
	<-w.release
	return w.ResponseRecorder.Write(b)
}

// get sends GET path with token straight to h.
func get(h http.Handler, w http.ResponseWriter, token, path string) {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.Header.Set("Authorization", "Bearer "+token)
	h.ServeHTTP(w, r)
}

// TestServerConcurrencyBound: with MaxConcurrent answers being written,
// the next authorized request gets 503 with Retry-After at once instead of
// queueing.
func TestServerConcurrencyBound(t *testing.T) {
	allow := AuthorizerFunc(func(context.Context, string, string, string) (Decision, error) { return Decision{Allowed: true}, nil })
	m := NewMetrics(prometheus.NewRegistry())
	c := New(nil, m)
	c.Put("ns/rs", "id", "SecRuleEngine On\n", nil)
	h := NewServer(c, ServerOptions{Authorizer: allow, MaxConcurrent: 2, Logger: discardLog()}, m).Handler()
	writing, release := make(chan struct{}, 2), make(chan struct{})
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			w := blockedWriter{httptest.NewRecorder(), writing, release}
			get(h, w, "x", "/rules/ns/rs")
			codes <- w.Code
		})
	}
	<-writing
	<-writing
	w := httptest.NewRecorder()
	get(h, w, "x", "/rules/ns/rs")
	close(release)
	wg.Wait()
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("request beyond the bound: %d Retry-After %q, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
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

// TestForgedTokenFloodLeavesDataPlanesServed: requests whose token reviews
// hang (forged tokens against a slow API server) hold no serving slot and
// at most the unknown tokens' review slots, so a data plane whose decision
// is cached is served, one whose token was reviewed recently is reviewed
// again on slots of its own, and the flood past the review slots is
// answered 503 overloaded after the slot wait without reaching the API
// server.
func TestForgedTokenFloodLeavesDataPlanesServed(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tokens := &reviewer{block: make(chan struct{}), in: make(chan struct{}, 64)}
	var unblock sync.Once
	t.Cleanup(func() { unblock.Do(func() { close(tokens.block) }) }) // on a failure, the flood's reviews end too
	m := NewMetrics(prometheus.NewRegistry())
	c := New(nil, m)
	c.Put("team-a/rs", "id", "SecRuleEngine On\n", nil)
	h := NewServer(c, ServerOptions{
		Authorizer: newKubeAuthorizer(tokens, &denyAll{}, 0, m, clk), MaxConcurrent: 2, Logger: discardLog(),
	}, m).Handler()
	dataPlane := "team-a:proxy:" + Audience
	served := func(what string) {
		t.Helper()
		done := make(chan int, 1)
		go func() {
			w := httptest.NewRecorder()
			get(h, w, dataPlane, "/rules/team-a/rs")
			done <- w.Code
		}()
		select {
		case code := <-done:
			if code != http.StatusOK {
				t.Fatalf("%s: HTTP %d, want 200", what, code)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s waited behind the flood", what)
		}
	}
	served("the data plane's first read")

	const inFlight, flood = 8, 12 // kubereview.DefaultMaxInFlight, and four more waiting
	floodCodes := make(chan int, flood)
	for i := range flood {
		go func() {
			w := httptest.NewRecorder()
			get(h, w, "forged-"+strconv.Itoa(i), "/rules/team-a/rs")
			floodCodes <- w.Code
		}()
	}
	began := func(n int) {
		t.Helper()
		for i := range n {
			select {
			case <-tokens.in:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of the flood's token reviews began, want %d", i, n)
			}
		}
	}
	// As many as the server has slots: before the fix each of them held
	// one while its review hung, and the data plane got 503.
	began(2)
	served("a data plane whose decision is cached")
	began(inFlight - 2)
	waitFor(t, "the rest of the flood to wait for a review slot", func() bool { return clk.Waiters() == flood-inFlight })
	served("a data plane whose decision is cached, the review slots full")
	clk.Step(DefaultAllowTTL + time.Second) // its decision expires; the flood's waits end
	served("a data plane known from its last review")
	for range flood - inFlight {
		if code := <-floodCodes; code != http.StatusServiceUnavailable {
			t.Errorf("a forged token past the review slots: HTTP %d, want 503", code)
		}
	}
	unblock.Do(func() { close(tokens.block) })
	for range inFlight {
		if code := <-floodCodes; code != http.StatusUnauthorized {
			t.Errorf("a forged token reviewed: HTTP %d, want 401", code)
		}
	}
	if got := testutil.ToFloat64(m.Denied.WithLabelValues(DenyOverloaded)); got != flood-inFlight {
		t.Errorf("denied_total{reason=overloaded} = %v, want %d", got, flood-inFlight)
	}
	if n := tokens.calls.Load(); n != 2+inFlight {
		t.Errorf("%d token reviews, want %d: the data plane's two and one per forged token that got a slot", n, 2+inFlight)
	}
}

// TestServerLogsDenials: a refusal is one log line naming the reason, the
// path, the client and, when the token authenticated, the user; past a
// burst, a flood of refusals is logged at ten lines a second, each saying
// how many it left out, while every refusal is counted.
func TestServerLogsDenials(t *testing.T) {
	var buf bytes.Buffer
	clk := clocktesting.NewFakeClock(t0)
	m := NewMetrics(prometheus.NewRegistry())
	c := New(nil, nil)
	c.Put("team-a/crs", "id", "SecRuleEngine On\n", nil)
	h := NewServer(c, ServerOptions{Authorizer: teamA, Logger: slog.New(slog.NewJSONHandler(&buf, nil)), Clock: clk}, m).Handler()
	lines := func() []map[string]any {
		t.Helper()
		var out []map[string]any
		for l := range strings.Lines(buf.String()) {
			var line map[string]any
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("log %q: %v", l, err)
			}
			out = append(out, line)
		}
		return out
	}
	get(h, httptest.NewRecorder(), "team-b", "/rules/team-a/crs")
	if l := lines(); len(l) != 1 || l[0]["msg"] != "rule set cache request denied" || l[0]["reason"] != DenyForbidden ||
		l[0]["path"] != "/rules/team-a/crs" || l[0]["user"] != "system:serviceaccount:team-b:proxy" || l[0]["client"] == "" {
		t.Fatalf("log lines %v", l)
	}
	const flood = 1000
	for range flood {
		get(h, httptest.NewRecorder(), "forged", "/rules/team-a/crs")
	}
	if n := len(lines()); n != denyLogBurst {
		t.Errorf("%d refusals at once logged %d lines, want the burst of %d", flood+1, n, denyLogBurst)
	}
	clk.Step(time.Second)
	for range flood {
		get(h, httptest.NewRecorder(), "forged", "/rules/team-a/crs")
	}
	l := lines()
	if n := len(l); n != denyLogBurst+10 {
		t.Errorf("a second later, %d more refusals logged %d more lines, want 10", flood, n-denyLogBurst)
	}
	if got, want := l[denyLogBurst]["notLogged"], float64(flood+1-denyLogBurst); got != want {
		t.Errorf("the first line after the burst says notLogged=%v, want %v", got, want)
	}
	if got := testutil.ToFloat64(m.Denied.WithLabelValues(DenyUnauthenticated)); got != 2*flood {
		t.Errorf("denied_total{reason=unauthenticated} = %v, want %d: every refusal counts", got, 2*flood)
	}
}

// TestServerClientThatHungUp: a request whose client has gone makes no
// review, and is neither logged nor counted as a refusal.
func TestServerClientThatHungUp(t *testing.T) {
	var buf bytes.Buffer
	tokens := &reviewer{}
	m := NewMetrics(prometheus.NewRegistry())
	c := New(nil, nil)
	h := NewServer(c, ServerOptions{
		Authorizer: newKubeAuthorizer(tokens, &denyAll{}, 0, m, clocktesting.NewFakeClock(t0)),
		Logger:     slog.New(slog.NewJSONHandler(&buf, nil)),
	}, m).Handler()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/rules/team-a/crs", nil)
	r.Header.Set("Authorization", "Bearer forged")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if n := tokens.calls.Load(); n != 0 || buf.Len() != 0 || testutil.ToFloat64(m.Denied.WithLabelValues(DenyReviewFailed)) != 0 {
		t.Errorf("a cancelled request: %d reviews, log %q, review_failed %v; want none of them", n, buf.String(),
			testutil.ToFloat64(m.Denied.WithLabelValues(DenyReviewFailed)))
	}
	if n := testutil.CollectAndCount(m.Requests); n != 0 {
		t.Errorf("a cancelled request was counted in requests_total (%d series): nobody was answered", n)
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

// waitFor polls cond until it holds, for at most ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
