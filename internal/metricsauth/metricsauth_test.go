package metricsauth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// tokens answers TokenReviews as an API server would for the tokens it
// knows: "token-<name>" authenticates as the ServiceAccount <name> of ns.
type tokens struct {
	calls atomic.Int32
	err   error
	block chan struct{} // when set, each review of a token holding "slow" waits for it to close
	in    chan struct{} // when set, each review says it has begun
}

func (r *tokens) Create(ctx context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	r.calls.Add(1)
	if r.in != nil {
		r.in <- struct{}{}
	}
	if r.block != nil && strings.Contains(tr.Spec.Token, "slow") {
		select {
		case <-r.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	out := tr.DeepCopy()
	out.Status.Error = "invalid bearer token"
	if name, ok := strings.CutPrefix(tr.Spec.Token, "token-"); ok {
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
			Username: "system:serviceaccount:ns:" + name, UID: "uid-" + name,
			Groups: []string{"system:serviceaccounts", "group-" + name},
			Extra:  map[string]authenticationv1.ExtraValue{"k": {"v-" + name}},
		}}
	}
	return out, nil
}

// access allows the users it lists to get the paths it lists, and records
// what it was asked.
type access struct {
	mu      sync.Mutex
	allowed map[string]bool // "<user> <path>"
	denied  bool            // answer allowed and denied, as a deny-first authorizer may
	asked   []authorizationv1.SubjectAccessReviewSpec
	err     error
}

func (a *access) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, sar.Spec)
	if a.err != nil {
		return nil, a.err
	}
	out := sar.DeepCopy()
	nr := sar.Spec.NonResourceAttributes
	out.Status.Allowed = nr != nil && nr.Verb == "get" && a.allowed[sar.Spec.User+" "+nr.Path]
	out.Status.Denied = a.denied
	return out, nil
}

func (a *access) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.asked)
}

const scraper = "system:serviceaccount:ns:scraper"

type harness struct {
	tokens *tokens
	access *access
	clock  *clocktesting.FakeClock
	guard  *Guard
	srv    http.Handler
	served atomic.Int32
	logs   *logLines
}

// logLines records what the guard logs at verbosity 0 (errors and V(0))
// and at V(1).
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func newHarness(opts Options) *harness {
	h := &harness{
		tokens: &tokens{},
		access: &access{allowed: map[string]bool{scraper + " /metrics": true}},
		clock:  clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)),
	}
	opts.Clock = h.clock
	h.guard = New(h.tokens, h.access, opts)
	h.logs = &logLines{}
	log := funcr.New(func(prefix, args string) {
		h.logs.mu.Lock()
		defer h.logs.mu.Unlock()
		h.logs.lines = append(h.logs.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1, LogInfoLevel: ptr.To("v")})
	h.srv = h.guard.Wrap(log, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h.served.Add(1)
		_, _ = w.Write([]byte("portal_up 1\n"))
	}))
	return h
}

// do sends method path with the Authorization header auth (none when
// empty) and returns the response.
func (h *harness) do(method, path, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.srv.ServeHTTP(w, r)
	return w
}

func (h *harness) get(token string) int {
	auth := ""
	if token != "" {
		auth = "Bearer " + token
	}
	return h.do(http.MethodGet, "/metrics", auth).Code
}

func TestAllowedTokenScrapesWithOneReviewOfEach(t *testing.T) {
	h := newHarness(Options{})
	for i := range 3 {
		if got := h.get("token-scraper"); got != http.StatusOK {
			t.Fatalf("scrape %d: HTTP %d, want 200", i, got)
		}
	}
	if h.served.Load() != 3 {
		t.Errorf("handler ran %d times, want 3", h.served.Load())
	}
	if n, m := h.tokens.calls.Load(), h.access.count(); n != 1 || m != 1 {
		t.Errorf("three scrapes made %d token and %d access reviews, want 1 and 1 (cached)", n, m)
	}
	spec := h.access.asked[0]
	if spec.User != scraper || spec.UID != "uid-scraper" || len(spec.Groups) != 2 || spec.Extra["k"][0] != "v-scraper" ||
		spec.NonResourceAttributes == nil || spec.NonResourceAttributes.Path != "/metrics" || spec.ResourceAttributes != nil {
		t.Errorf("SubjectAccessReview asked %+v: want the token's user, UID, groups and extra, get on the non-resource /metrics", spec)
	}
	// An allowed user is trusted for AllowTTL, its token for TokenTTL.
	h.clock.Step(DefaultTokenTTL + time.Second)
	h.get("token-scraper")
	if n, m := h.tokens.calls.Load(), h.access.count(); n != 2 || m != 1 {
		t.Errorf("after the token's TTL: %d token and %d access reviews, want 2 and 1", n, m)
	}
	h.clock.Step(DefaultAllowTTL)
	h.get("token-scraper")
	if m := h.access.count(); m != 2 {
		t.Errorf("after the allow TTL: %d access reviews, want 2", m)
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, method, auth string
		want               int
		wantText           string
	}{
		{"no header", http.MethodGet, "", http.StatusUnauthorized, "Authorization: Bearer"},
		{"not a bearer", http.MethodGet, "Basic dXNlcjpwYXNz", http.StatusUnauthorized, "Authorization: Bearer"},
		{"empty bearer", http.MethodGet, "Bearer   ", http.StatusUnauthorized, "Authorization: Bearer"},
		{"forged token", http.MethodGet, "Bearer forged", http.StatusUnauthorized, "did not authenticate"},
		{"token past the bound", http.MethodGet, "Bearer token-" + strings.Repeat("a", MaxTokenBytes), http.StatusUnauthorized, "at most 16384 bytes"},
		{"not bound", http.MethodGet, "Bearer token-stranger", http.StatusForbidden, "system:serviceaccount:ns:stranger may not get /metrics: bind it to a ClusterRole with nonResourceURLs [/metrics]"},
		{"another method", http.MethodPost, "Bearer token-scraper", http.StatusMethodNotAllowed, "only GET"},
		{"head", http.MethodHead, "Bearer token-scraper", http.StatusMethodNotAllowed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(Options{})
			w := h.do(tc.method, "/metrics", tc.auth)
			if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.wantText) {
				t.Errorf("HTTP %d %.200q, want %d containing %q", w.Code, w.Body.String(), tc.want, tc.wantText)
			}
			if strings.Contains(w.Body.String(), "invalid bearer token") {
				t.Errorf("the answer %q tells the client the API server's reason", w.Body.String())
			}
			if h.served.Load() != 0 {
				t.Error("the refused request reached the metrics handler")
			}
		})
	}
}

func TestNoReviewForWhatNeedsNone(t *testing.T) {
	h := newHarness(Options{})
	h.do(http.MethodGet, "/metrics", "")
	h.do(http.MethodPost, "/metrics", "Bearer token-scraper")
	h.do("PURGE", "/metrics", "Bearer token-scraper")
	h.do(http.MethodGet, "/metrics", "Bearer "+strings.Repeat("a", MaxTokenBytes+1))
	if n, m := h.tokens.calls.Load(), h.access.count(); n != 0 || m != 0 {
		t.Errorf("no token, another method or a token past the bound: %d token and %d access reviews, want none", n, m)
	}
}

func TestRefusalsAreCachedForTheDenyTTL(t *testing.T) {
	h := newHarness(Options{})
	h.get("forged")
	h.get("forged")
	h.get("token-stranger")
	h.get("token-stranger")
	if n, m := h.tokens.calls.Load(), h.access.count(); n != 2 || m != 1 {
		t.Fatalf("two forged and two unbound scrapes: %d token and %d access reviews, want 2 and 1", n, m)
	}
	h.clock.Step(DefaultDenyTTL + time.Second)
	// The binding made in the meantime counts once the refusal expires.
	h.access.mu.Lock()
	h.access.allowed["system:serviceaccount:ns:stranger /metrics"] = true
	h.access.mu.Unlock()
	if got := h.get("token-stranger"); got != http.StatusOK {
		t.Errorf("after the deny TTL with a binding: HTTP %d, want 200", got)
	}
	// A refused token is reviewed again after the deny TTL, not the token TTL.
	h.get("forged")
	if n := h.tokens.calls.Load(); n != 3 {
		t.Errorf("a forged token after the deny TTL: %d token reviews in all, want 3", n)
	}
}

func TestDeniedWinsOverAllowed(t *testing.T) {
	h := newHarness(Options{})
	h.access.denied = true
	if got := h.get("token-scraper"); got != http.StatusForbidden {
		t.Errorf("an access review both allowed and denied: HTTP %d, want 403", got)
	}
}

func TestFailedReviewIsNotCached(t *testing.T) {
	h := newHarness(Options{})
	h.tokens.err = errors.New("connection refused")
	if got := h.get("token-scraper"); got != http.StatusServiceUnavailable {
		t.Fatalf("API server unreachable: HTTP %d, want 503", got)
	}
	h.tokens.err = nil
	if got := h.get("token-scraper"); got != http.StatusOK {
		t.Errorf("API server back: HTTP %d, want 200 (a failed review is not an answer to keep)", got)
	}
	h.access.err = errors.New("connection refused")
	if got := h.get("token-other"); got != http.StatusServiceUnavailable {
		t.Errorf("access review failing: HTTP %d, want 503", got)
	}
	h.access.err = nil
	h.access.allowed["system:serviceaccount:ns:other /metrics"] = true
	if got := h.get("token-other"); got != http.StatusOK {
		t.Errorf("access review back: HTTP %d, want 200 (a failed access review is not an answer to keep)", got)
	}
}

// TestReviewsInFlightAreBounded: with every token review slot taken by a
// slow review, a request that needs another waits SlotWait and is answered
// 503; one that a slot frees for in time goes on; a cached token needs no
// slot at all.
func TestReviewsInFlightAreBounded(t *testing.T) {
	h := newHarness(Options{MaxInFlight: 2})
	if got := h.get("token-scraper"); got != http.StatusOK {
		t.Fatalf("first scrape: HTTP %d", got)
	}
	h.tokens.block, h.tokens.in = make(chan struct{}), make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { h.get("token-slow-" + strconv.Itoa(i)) })
	}
	<-h.tokens.in
	<-h.tokens.in
	if got := h.get("token-scraper"); got != http.StatusOK {
		t.Errorf("a cached token with every slot taken: HTTP %d, want 200", got)
	}
	third := make(chan *httptest.ResponseRecorder, 1)
	go func() { third <- h.do(http.MethodGet, "/metrics", "Bearer forged") }()
	waitFor(t, "the third review to wait for a slot", h.clock.HasWaiters)
	select {
	case w := <-third:
		t.Fatalf("a third review with two in flight answered %d before SlotWait", w.Code)
	default:
	}
	h.clock.Step(DefaultSlotWait)
	w := <-third
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("a third review after SlotWait: HTTP %d, Retry-After %q: want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	// One that a slot frees for goes on.
	go func() { third <- h.do(http.MethodGet, "/metrics", "Bearer forged") }()
	waitFor(t, "the fourth review to wait for a slot", h.clock.HasWaiters)
	close(h.tokens.block)
	if w := <-third; w.Code != http.StatusUnauthorized {
		t.Errorf("a review that got a freed slot: HTTP %d, want 401", w.Code)
	}
	wg.Wait()
	if n := h.tokens.calls.Load(); n != 4 {
		t.Errorf("%d token reviews, want 4: the one refused for want of a slot must not have made one", n)
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

// TestCachesAreBounded: forged tokens do not push a scraper's out of a
// cache of 16 (kubereview's TestCachesAreBounded counts the entries).
func TestCachesAreBounded(t *testing.T) {
	h := newHarness(Options{CacheSize: 16})
	h.get("token-scraper")
	for i := range 1000 {
		h.get("forged-" + strconv.Itoa(i))
	}
	before := h.tokens.calls.Load()
	if got := h.get("token-scraper"); got != http.StatusOK || h.tokens.calls.Load() != before {
		t.Errorf("the scraper's token after 1,000 forged ones: HTTP %d, %d more reviews: want 200 from the cache", got, h.tokens.calls.Load()-before)
	}
}

// TestClientThatHungUp: a request whose client has gone makes no review and
// logs nothing.
func TestClientThatHungUp(t *testing.T) {
	h := newHarness(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/metrics", nil)
	r.Header.Set("Authorization", "Bearer forged")
	h.srv.ServeHTTP(httptest.NewRecorder(), r)
	if n := h.tokens.calls.Load(); n != 0 {
		t.Errorf("a cancelled request made %d token reviews, want none", n)
	}
	if l := h.logs.all(); len(l) != 0 {
		t.Errorf("a cancelled request logged %q", l)
	}
}

// TestLogs: refusals and their reasons go to the debug log (V(1)), and
// failed reviews to the error log at most once a minute.
func TestLogs(t *testing.T) {
	h := newHarness(Options{})
	h.get("forged")
	l := h.logs.all()
	if len(l) != 1 || !strings.Contains(l[0], `"v"=1`) || !strings.Contains(l[0], "invalid bearer token") {
		t.Errorf("a refused token logged %q: want one V(1) line with the API server's reason", l)
	}
	h.tokens.err = errors.New("the server has received too many requests")
	for i := range 5 {
		h.get("token-throttled-" + strconv.Itoa(i))
	}
	errs := 0
	for _, line := range h.logs.all() {
		// funcr marks info lines with their verbosity, error lines not.
		if !strings.Contains(line, `"v"=`) {
			errs++
		}
	}
	if errs != 1 {
		t.Errorf("five failed reviews logged %d error lines, want 1:\n%s", errs, strings.Join(h.logs.all(), "\n"))
	}
}

func TestTokenLengthBound(t *testing.T) {
	h := newHarness(Options{})
	at := "token-" + strings.Repeat("a", MaxTokenBytes-len("token-"))
	if got := h.get(at); got == http.StatusUnauthorized || h.tokens.calls.Load() != 1 {
		t.Errorf("a token of exactly %d bytes: HTTP %d after %d reviews, want it reviewed", MaxTokenBytes, got, h.tokens.calls.Load())
	}
	if got := h.get(at + "a"); got != http.StatusUnauthorized || h.tokens.calls.Load() != 1 {
		t.Errorf("a token of %d bytes: HTTP %d after %d reviews, want 401 without a review", MaxTokenBytes+1, got, h.tokens.calls.Load())
	}
}

// within runs f and fails the test unless it returns within ten seconds:
// a request that needs a slot of its own must not wait for another kind's.
func within(t *testing.T, what string, f func() int) int {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- f() }()
	select {
	case code := <-done:
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for a slot", what)
		return 0
	}
}

// TestSlotsOfTheirOwn: with every slot for unknown tokens taken by slow
// reviews, a token trusted a minute ago is reviewed again on the known
// tokens' slots, and an access review on the access slots.
func TestSlotsOfTheirOwn(t *testing.T) {
	h := newHarness(Options{MaxInFlight: 2})
	h.get("token-scraper")
	h.get("token-other")
	h.clock.Step(DefaultTokenTTL + time.Second) // both tokens' entries expire, the known ones stay
	h.get("token-other")                        // reviewed again: trusted, refused by RBAC
	h.clock.Step(DefaultDenyTTL + time.Second)  // the refusal expires, the token is still trusted
	h.access.mu.Lock()
	h.access.allowed["system:serviceaccount:ns:other /metrics"] = true
	h.access.mu.Unlock()

	h.tokens.block, h.tokens.in = make(chan struct{}), make(chan struct{}, 2)
	defer close(h.tokens.block)
	for i := range 2 {
		go h.get("slow-" + strconv.Itoa(i))
	}
	<-h.tokens.in
	<-h.tokens.in
	if got := within(t, "a known token's review", func() int { return h.get("token-scraper") }); got != http.StatusOK {
		t.Errorf("a known token with the unknown tokens' slots taken: HTTP %d, want 200", got)
	}
	if got := within(t, "an access review", func() int { return h.get("token-other") }); got != http.StatusOK {
		t.Errorf("an access review with the token slots taken: HTTP %d, want 200", got)
	}
}
