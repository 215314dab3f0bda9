package cache

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

func testServer(t *testing.T) (*Cache, *Metrics, *httptest.Server) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	c := New(clocktesting.NewFakePassiveClock(t0), m)
	c.Put("team-a/crs", "11111111-2222-5333-8444-555555555555", "SecRuleEngine On\n", map[string][]byte{"words.txt": []byte("evil\n")})
	c.Put("team-a/plain", "66666666-2222-5333-8444-555555555555", "SecRuleEngine Off\n", nil)
	srv := httptest.NewServer(NewServer(c, ServerOptions{}, m).Handler())
	t.Cleanup(srv.Close)
	return c, m, srv
}

func do(t *testing.T, method, url string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
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
	_, body = do(t, http.MethodGet, srv.URL+"/rules/team-a/crs/latest", nil)
	if body != `{"uuid":"11111111-2222-5333-8444-555555555555","timestamp":"2026-01-02T03:04:05Z"}` {
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
		{"GET", "/rules/team-b/crs/latest", nil, 404},
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
	s := NewServer(c, ServerOptions{Addr: "127.0.0.1:0", GCInterval: time.Minute, Clock: clk}, nil)
	if s.NeedLeaderElection() {
		t.Fatal("the cache server must run on every replica")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	<-s.Ready()
	cl, err := NewClient("http://"+s.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := cl.Latest(ctx, "ns", "rs"); err != nil || l.UUID != "new" {
		t.Fatalf("latest %+v %v", l, err)
	}
	if e, err := cl.Entry(ctx, "ns", "rs"); err != nil || e.Rules != "SecRuleEngine On\n" {
		t.Fatalf("entry %+v %v", e, err)
	}
	if _, err := cl.Latest(ctx, "ns", "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing rule set: %v", err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr()+"/rules/ns/rs", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 2*MaxHeaderBytes))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
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
	s := NewServer(New(nil, nil), ServerOptions{Addr: "127.0.0.1:-1"}, nil)
	if err := s.Start(context.Background()); err == nil {
		t.Fatal("Start listened on port -1")
	}
}
