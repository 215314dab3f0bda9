package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// newPoller polls ns/name of cs into h's proxy; tests call Poll directly.
func newPoller(cs *cacheServer, h *harness) *Poller {
	return &Poller{Client: cs.client, Namespace: "ns", Name: "guard", Interval: MinPollInterval, Target: h.proxy, Logger: discard(), Metrics: h.metrics}
}

// revisionRules blocks ?q=evil and carries n so every revision differs.
func revisionRules(n int) string {
	return fmt.Sprintf("SecRuleEngine On\nSecRequestBodyAccess On\n# revision %d\n"+
		"SecRule ARGS \"@streq evil\" \"id:%d,phase:2,deny,status:403,log,msg:'evil %d'\"\n", n, 100100+n, n)
}

func TestPollerLoadsNewRevisions(t *testing.T) {
	cs, h := startCache(t), newHarness(t, nil)
	p := newPoller(cs, h)
	if _, err := p.Poll(t.Context()); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("poll of an unknown rule set: %v", err)
	}
	first := cs.put("ns", "guard", revisionRules(1), nil)
	if changed, err := p.Poll(t.Context()); !changed || err != nil {
		t.Fatalf("first poll: %v %v", changed, err)
	}
	if changed, err := p.Poll(t.Context()); changed || err != nil {
		t.Fatalf("poll without a new revision: %v %v", changed, err)
	}
	if rev, _ := h.proxy.Current(); rev.UUID != first || rev.Timestamp.IsZero() {
		t.Fatalf("in force %+v, want %s with the cache's timestamp", rev, first)
	}
	second := cs.put("ns", "guard", revisionRules(2), map[string][]byte{"words.txt": []byte("x\n")})
	if changed, err := p.Poll(t.Context()); !changed || err != nil {
		t.Fatalf("second poll: %v %v", changed, err)
	}
	if rev, _ := h.proxy.Current(); rev.UUID != second || rev.Bundle.DataFiles["words.txt"] == nil {
		t.Fatalf("in force %+v, want %s with its data file", rev.UUID, second)
	}
	if got := counter(t, h.metrics.Reloads); got != 2 {
		t.Errorf("reloads = %v, want 2", got)
	}
	if got := counter(t, h.metrics.Revision.WithLabelValues(second)); got < 1e9 {
		t.Errorf("revision gauge for %s = %v, want its timestamp", second, got)
	}
	if got := counter(t, h.metrics.Revision.WithLabelValues(first)); got != 0 {
		t.Errorf("the revision gauge still holds %s", first)
	}
}

// A revision that does not compile, and a cache that cannot be reached,
// leave the last good WAF in force; a broken revision is not compiled
// again until the uuid changes.
func TestPollerKeepsLastGood(t *testing.T) {
	cs, h := startCache(t), newHarness(t, nil)
	p := newPoller(cs, h)
	good := cs.put("ns", "guard", revisionRules(1), nil)
	if _, err := p.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	cs.put("ns", "guard", "SecRule ARGS \"@rx (\" \"id:1,deny\"\n", nil)
	if _, err := p.Poll(t.Context()); err == nil {
		t.Fatal("a broken revision loaded")
	}
	if _, err := p.Poll(t.Context()); err != nil {
		t.Fatalf("the broken revision was retried: %v", err)
	}
	if got := counter(t, h.metrics.ReloadFailures.WithLabelValues(FailureCompile)); got != 1 {
		t.Errorf("compile failures = %v, want 1", got)
	}
	if rev, _ := h.proxy.Current(); rev.UUID != good {
		t.Fatalf("in force %s, want the last good %s", rev.UUID, good)
	}
	if code, _ := h.do(t, "GET", "/?q=evil", ""); code != 403 {
		t.Fatalf("after a compile failure: %d, want 403", code)
	}

	cs.server.Close()
	if _, err := p.Poll(t.Context()); err == nil {
		t.Fatal("poll of a stopped cache succeeded")
	}
	if got := counter(t, h.metrics.ReloadFailures.WithLabelValues(FailureFetch)); got != 1 {
		t.Errorf("fetch failures = %v, want 1", got)
	}
	if code, _ := h.do(t, "GET", "/?q=evil", ""); code != 403 {
		t.Fatalf("with the cache down: %d, want 403", code)
	}
	if code, _ := h.do(t, "GET", "/?q=good", ""); code != 200 {
		t.Fatalf("with the cache down: %d, want 200", code)
	}
}

// An in-flight request finishes on the WAF it started with, and that WAF
// is closed once it is done, not before.
func TestSwapWaitsForInFlight(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := newHarness(t, nil)
	hold := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "token-A")
	})
	h.upstream.override.Store(&hold)
	leak := func(token string) string {
		return "SecRuleEngine On\nSecResponseBodyAccess On\nSecResponseBodyMimeType text/plain\n" +
			"SecRule RESPONSE_BODY \"@contains " + token + "\" \"id:100200,phase:4,deny,status:502,log\"\n"
	}
	h.load(t, leak("token-A"))
	old := h.proxy.cur.Load()

	result := make(chan int, 1)
	go func() {
		code, _, err := send(h.front.Client(), "GET", h.front.URL+"/hold", "")
		if err != nil {
			code = -1
		}
		result <- code
	}()
	<-entered
	h.load(t, leak("token-B"))
	if n := old.refs.Load(); n != 1 {
		t.Fatalf("retired WAF holds %d references during the request, want 1 (the request)", n)
	}
	close(release)
	if code := <-result; code != 502 {
		t.Fatalf("in-flight request: %d, want 502 from the WAF it started with", code)
	}
	eventually(t, "the retired WAF closed", func() bool { return old.refs.Load() == 0 })
	if code, _ := h.do(t, "GET", "/", ""); code != 200 {
		t.Fatalf("new request: %d, want 200 under the new rule set", code)
	}
}

// Swaps under a steady, bounded load: four clients send clean and
// malicious requests while revisions are swapped in; every answer is the
// upstream's 200 or the WAF's 403, and every retired WAF ends up closed.
func TestSwapUnderLoad(t *testing.T) {
	cs, h := startCache(t), newHarness(t, nil)
	p := newPoller(cs, h)
	cs.put("ns", "guard", revisionRules(0), nil)
	if _, err := p.Poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	const workers, perWorker = 4, 150
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	var done atomic.Int64
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() { errs <- steadyLoad(ctx, h, w, perWorker, &done) })
	}
	// Nine swaps spread over the load: swap n once n tenths are answered.
	var retired []*generation
	for n := 1; n <= 9; n++ {
		eventually(t, fmt.Sprintf("%d0%% of the load", n), func() bool { return done.Load() >= int64(n*workers*perWorker/10) })
		before := h.proxy.cur.Load()
		cs.put("ns", "guard", revisionRules(n), nil)
		if changed, err := p.Poll(t.Context()); !changed || err != nil {
			t.Fatalf("swap %d: %v %v", n, changed, err)
		}
		retired = append(retired, before)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for i, g := range retired {
		if g.refs.Load() != 0 {
			t.Errorf("retired WAF %d still holds %d references", i, g.refs.Load())
		}
	}
	if got := counter(t, h.metrics.Requests.WithLabelValues("200")) + counter(t, h.metrics.Requests.WithLabelValues("403")); got != workers*perWorker {
		t.Errorf("requests counted %v, want %d", got, workers*perWorker)
	}
}

// steadyLoad sends n requests, alternating clean and malicious GETs and
// POSTs, and reports the first unexpected answer.
func steadyLoad(ctx context.Context, h *harness, worker, n int, done *atomic.Int64) error {
	client := h.front.Client()
	for i := range n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var method, path, body, ct string
		evil := i%2 == 1
		q := "good"
		if evil {
			q = "evil"
		}
		if i%4 < 2 {
			method, path = "GET", "/?q="+q
		} else {
			method, path, body, ct = "POST", "/", "q="+q, "application/x-www-form-urlencoded"
		}
		code, got, err := send(client, method, h.front.URL+path, body, "Content-Type", ct)
		done.Add(1)
		switch {
		case err != nil:
			return fmt.Errorf("worker %d request %d: %w", worker, i, err)
		case evil && code != 403:
			return fmt.Errorf("worker %d request %d (%s %s): %d, want 403", worker, i, method, q, code)
		case !evil && (code != 200 || (body == "" && got != "hello") || (body != "" && got != body)):
			return fmt.Errorf("worker %d request %d (%s %s): %d %q, want the upstream's 200", worker, i, method, q, code, got)
		}
	}
	return nil
}

func TestPollerRun(t *testing.T) {
	cs, h := startCache(t), newHarness(t, nil)
	p := newPoller(cs, h)
	first := cs.put("ns", "guard", revisionRules(1), nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	eventually(t, "the first revision", func() bool { rev, _ := h.proxy.Current(); return rev.UUID == first })
	second := cs.put("ns", "guard", revisionRules(2), nil)
	eventually(t, "the second revision", func() bool { rev, _ := h.proxy.Current(); return rev.UUID == second })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}
