package kubereview

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
)

// tokens answers TokenReviews as an API server would: "<name>@<audience>"
// authenticates as user <name> for that audience, "<name>" for the API
// server's own (no audience asked); ignoreAudiences answers as an
// authenticator that does not know audiences (authenticated, none echoed).
type tokens struct {
	mu              sync.Mutex
	asked           []authenticationv1.TokenReviewSpec
	ignoreAudiences bool
	// block, when set, holds each review of a token starting "slow" until
	// it is closed or the review's context ends; in hears of each.
	block, in chan struct{}
}

func (r *tokens) Create(ctx context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	if r.block != nil && strings.HasPrefix(tr.Spec.Token, "slow") {
		r.in <- struct{}{}
		select {
		case <-r.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, tr.Spec)
	out := tr.DeepCopy()
	name, aud, scoped := strings.Cut(tr.Spec.Token, "@")
	switch {
	case name == "forged":
	case r.ignoreAudiences:
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: name}}
	case !scoped && len(tr.Spec.Audiences) == 0, scoped && slices.Contains(tr.Spec.Audiences, aud):
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: name}}
		if scoped {
			out.Status.Audiences = []string{aud}
		}
	}
	return out, nil
}

func (r *tokens) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asked)
}

// access allows every access review but of users named "denied-*", and
// counts them.
type access struct{ calls atomic.Int32 }

func (a *access) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	a.calls.Add(1)
	out := sar.DeepCopy()
	out.Status.Allowed = !strings.HasPrefix(sar.Spec.User, "denied-")
	return out, nil
}

func newReviewer(opts Options) (*Reviewer, *tokens, *clocktesting.FakeClock) {
	r, tk, _, clk := newReviewerAccess(opts)
	return r, tk, clk
}

func newReviewerAccess(opts Options) (*Reviewer, *tokens, *access, *clocktesting.FakeClock) {
	tk, ac := &tokens{}, &access{}
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	opts.Clock = clk
	return New(tk, ac, opts), tk, ac, clk
}

func authenticate(t *testing.T, r *Reviewer, token string, audiences ...string) string {
	t.Helper()
	u, _, err := r.Authenticate(context.Background(), token, audiences...)
	if err != nil {
		t.Fatal(err)
	}
	if u == nil {
		return ""
	}
	return u.Username
}

// TestAudiences: the audiences asked for go to the API server, a token is
// trusted only for an audience it was reviewed for, and an authenticator
// that ignores audiences (answering with none) is not trusted for any.
func TestAudiences(t *testing.T) {
	r, tk, _ := newReviewer(Options{})
	if got := authenticate(t, r, "alice@cache", "cache", "cache/ns/rs"); got != "alice" {
		t.Errorf("a token for the audience asked: user %q, want alice", got)
	}
	if got := tk.asked[0].Audiences; !slices.Equal(got, []string{"cache", "cache/ns/rs"}) {
		t.Errorf("the review asked for audiences %q", got)
	}
	if got := authenticate(t, r, "alice@cache", "other"); got != "" {
		t.Errorf("the same token for another audience: user %q, want none (its trust for cache must not answer)", got)
	}
	if got := authenticate(t, r, "alice@cache"); got != "" {
		t.Errorf("a token for cache, asked for the API server's audience: user %q, want none", got)
	}
	if n := tk.calls(); n != 3 {
		t.Errorf("%d reviews, want 3: each audience is a question of its own", n)
	}
	tk.ignoreAudiences = true
	if got := authenticate(t, r, "bob", "cache"); got != "" {
		t.Errorf("an authenticator that ignores audiences: user %q, want none", got)
	}
	if got := authenticate(t, r, "carol"); got != "carol" {
		t.Errorf("no audience asked, authenticated: user %q, want carol", got)
	}
}

// TestKeysTellQuestionsApart: no two different token reviews or access
// reviews share a cache key, whatever their strings hold.
func TestKeysTellQuestionsApart(t *testing.T) {
	tokenQuestions := [][]string{
		{"ab"}, {"a", "b"}, {"ab", ""}, {"a", "b", ""}, {"", "ab"}, {"a\x00", "b"}, {"a", "\x00b"},
		{"\x00\x00\x00\x00\x00\x00\x00\x01a", "b"}, {"\x00\x00\x00\x00\x00\x00\x00\x01", "ab"},
	}
	tokenKeys := map[[32]byte]int{}
	for i, q := range tokenQuestions {
		k := tokenKey(q[0], q[1:])
		if j, ok := tokenKeys[k]; ok {
			t.Errorf("token question %q has the key of %q", q, tokenQuestions[j])
		}
		tokenKeys[k] = i
	}

	long := "x" + strings.Repeat("3:abc", 18)
	users := []authenticationv1.UserInfo{
		{Username: "u", Groups: []string{"admins"}},
		{Username: "u"},
		{Username: "u", Extra: map[string]authenticationv1.ExtraValue{"admins": nil}},
		{Username: "u", Extra: map[string]authenticationv1.ExtraValue{"admins": {}}},
		{Username: "u", Extra: map[string]authenticationv1.ExtraValue{"a": {"dmins"}}},
		{Username: "u", UID: "admins"},
		{Username: "uadmins"},
		// Counts written before digits: one group of these bytes, and 19.
		{Username: "u", Groups: []string{long}},
		{Username: "u", Groups: append([]string{"x"}, slices.Repeat([]string{"abc"}, 18)...)},
	}
	keys := map[[32]byte]string{}
	for i, u := range users {
		for j, attrs := range []func(*authorizationv1.SubjectAccessReviewSpec){
			func(s *authorizationv1.SubjectAccessReviewSpec) {
				s.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}
			},
			func(s *authorizationv1.SubjectAccessReviewSpec) {
				s.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: "/metricsadmins", Verb: "get"}
			},
			func(s *authorizationv1.SubjectAccessReviewSpec) {
				s.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: "a", Name: "b", Verb: "get", Resource: "rulesets"}
			},
			func(s *authorizationv1.SubjectAccessReviewSpec) {
				s.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: "ab", Verb: "get", Resource: "rulesets"}
			},
		} {
			spec := Subject(&u)
			attrs(&spec)
			k, err := decisionKey(&spec)
			if err != nil {
				t.Fatal(err)
			}
			q := strconv.Itoa(i) + "/" + strconv.Itoa(j)
			if prev, ok := keys[k]; ok {
				t.Errorf("access question %s has the key of %s: one user's decision would answer for another", q, prev)
			}
			keys[k] = q
		}
	}
}

// TestCachesAreBounded: a flood of distinct tokens, forged and genuine,
// leaves at most CacheSize entries in each cache.
func TestCachesAreBounded(t *testing.T) {
	r, _, _ := newReviewer(Options{CacheSize: 16})
	ctx := context.Background()
	for i := range 1000 {
		authenticate(t, r, "forged"+strconv.Itoa(i))
		u := authenticate(t, r, "user"+strconv.Itoa(i))
		if _, _, err := r.Authorize(ctx, Subject(&authenticationv1.UserInfo{Username: u})); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]interface{ Keys() []any }{"trusted": r.trusted, "known": r.known, "refused": r.refused, "granted": r.granted, "denied": r.denied} {
		if n := len(c.Keys()); n > 16 {
			t.Errorf("after 2,000 distinct tokens: %d %s entries, want at most 16", n, name)
		}
	}
}

// TestReviewedCountsReviewsMade: the hook hears of each review made, with
// its result, and of none answered from a cache.
func TestReviewedCountsReviewsMade(t *testing.T) {
	var heard []string
	r, _, clk := newReviewer(Options{Reviewed: func(review, result string) { heard = append(heard, review+" "+result) }})
	ctx := context.Background()
	for range 2 {
		authenticate(t, r, "forged")
		authenticate(t, r, "alice")
		if _, _, err := r.Authorize(ctx, Subject(&authenticationv1.UserInfo{Username: "alice"})); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"token denied", "token allowed", "access allowed"}
	if !slices.Equal(heard, want) {
		t.Errorf("heard %q, want %q (the second round answered from the caches)", heard, want)
	}
	clk.Step(DefaultTokenTTL + time.Second)
	authenticate(t, r, "alice")
	if len(heard) != 4 {
		t.Errorf("after the token TTL: heard %q, want one more token review", heard)
	}
}

// TestOneTokenTakesOneEntry: one token asked for many audiences it holds
// (a data plane's token for the cache, read for any rule set's URL) is
// reviewed once and takes one entry, so nobody with a valid token can push
// other clients' entries out by asking many questions; a token asked for
// an audience it does not hold is refused without losing what it holds.
func TestOneTokenTakesOneEntry(t *testing.T) {
	r, tk, _ := newReviewer(Options{CacheSize: 16})
	authenticate(t, r, "dataplane@cache", "cache", "cache/ns/rs")
	for i := range 1000 {
		if got := authenticate(t, r, "attacker@cache", "cache", "cache/ns/rs-"+strconv.Itoa(i)); got != "attacker" {
			t.Fatalf("a valid token for question %d: user %q", i, got)
		}
	}
	if n := tk.calls(); n != 2 {
		t.Errorf("two tokens asked 1,001 questions: %d reviews, want 2", n)
	}
	if n := len(r.trusted.Keys()); n != 2 {
		t.Errorf("%d trusted entries, want 2", n)
	}
	if got := authenticate(t, r, "scoped@cache/ns/a", "cache", "cache/ns/a"); got != "scoped" {
		t.Fatalf("a token scoped to its rule set: user %q", got)
	}
	for i := range 1000 {
		if got := authenticate(t, r, "scoped@cache/ns/a", "cache", "cache/ns/rs-"+strconv.Itoa(i)); got != "" {
			t.Fatalf("a token scoped to another rule set: user %q, want none", got)
		}
	}
	before := tk.calls()
	if got := authenticate(t, r, "dataplane@cache", "cache", "cache/ns/rs"); got != "dataplane" || tk.calls() != before {
		t.Errorf("the data plane after 2,000 other questions: user %q after %d more reviews, want its cached answer", got, tk.calls()-before)
	}
	if got := authenticate(t, r, "scoped@cache/ns/a", "cache", "cache/ns/a"); got != "scoped" || tk.calls() != before {
		t.Errorf("the scoped token for its own rule set after 1,000 refusals: user %q after %d more reviews, want its cached answer", got, tk.calls()-before)
	}
}

// TestDenialsDoNotPushOutGrants: a user who asks for access it lacks, as
// often as it likes, fills the denials' cache, not the grants'.
func TestDenialsDoNotPushOutGrants(t *testing.T) {
	r, _, ac, _ := newReviewerAccess(Options{CacheSize: 16})
	ctx := context.Background()
	spec := func(user, name string) authorizationv1.SubjectAccessReviewSpec {
		s := Subject(&authenticationv1.UserInfo{Username: user})
		s.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: "ns", Name: name, Verb: "get", Resource: "rulesets"}
		return s
	}
	if ok, _, err := r.Authorize(ctx, spec("proxy", "rs")); !ok || err != nil {
		t.Fatalf("the grant: %v %v", ok, err)
	}
	for i := range 1000 {
		if ok, _, _ := r.Authorize(ctx, spec("denied-attacker", "rs-"+strconv.Itoa(i))); ok {
			t.Fatal("a denied user was allowed")
		}
	}
	before := ac.calls.Load()
	if ok, _, err := r.Authorize(ctx, spec("proxy", "rs")); !ok || err != nil || ac.calls.Load() != before {
		t.Errorf("the grant after 1,000 denials: %v %v after %d more reviews, want it from the cache", ok, err, ac.calls.Load()-before)
	}
}

// TestWaitersAreBounded: with every slot taken, 4*MaxInFlight reviews wait
// for one and the next gives up at once, without a review.
func TestWaitersAreBounded(t *testing.T) {
	r, tk, clk := newReviewer(Options{MaxInFlight: 1})
	tk.block, tk.in = make(chan struct{}), make(chan struct{}, 1)
	defer close(tk.block)
	go func() { _, _, _ = r.Authenticate(context.Background(), "slow") }()
	<-tk.in
	for i := range 4 {
		go func() { _, _, _ = r.Authenticate(context.Background(), "waiting-"+strconv.Itoa(i)) }()
	}
	waitFor(t, "four reviews to wait for the slot", func() bool { return clk.Waiters() == 4 })
	done := make(chan error, 1)
	go func() { _, _, err := r.Authenticate(context.Background(), "one-too-many"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrBusy) || tk.calls() != 0 {
			t.Errorf("the fifth waiting review: %v after %d finished reviews, want ErrBusy and none", err, tk.calls())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fifth review waited too")
	}
	clk.Step(DefaultSlotWait)
}

// TestCallerThatGaveUpIsNoError: a review whose caller's context ends
// while it is made fails, and is not counted as the API server's error.
func TestCallerThatGaveUpIsNoError(t *testing.T) {
	var heard atomic.Int32
	r, tk, _ := newReviewer(Options{Reviewed: func(_, result string) {
		if result == "error" {
			heard.Add(1)
		}
	}})
	tk.block, tk.in = make(chan struct{}), make(chan struct{}, 1)
	defer close(tk.block)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, _, err := r.Authenticate(ctx, "slow"); done <- err }()
	<-tk.in
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled review: %v", err)
	}
	if n := heard.Load(); n != 0 {
		t.Errorf("a cancelled review was counted as %d API server errors", n)
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

// TestAudiencesKeptAreTheOnesAsked: an authenticator that answers with
// audiences nobody asked for is not believed for them later.
func TestAudiencesKeptAreTheOnesAsked(t *testing.T) {
	r, _, _ := newReviewer(Options{})
	r.tokens = tokenReviewerFunc(func(tr *authenticationv1.TokenReview) {
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"cache/ns/a", "cache/ns/b"},
			User: authenticationv1.UserInfo{Username: "proxy"}}
	})
	if got := authenticate(t, r, "tok", "cache", "cache/ns/a"); got != "proxy" {
		t.Fatalf("the first review: user %q", got)
	}
	reviews := 0
	r.tokens = tokenReviewerFunc(func(*authenticationv1.TokenReview) { reviews++ })
	if got := authenticate(t, r, "tok", "cache", "cache/ns/b"); got != "" || reviews != 1 {
		t.Errorf("an audience only the answer named: user %q after %d reviews, want it reviewed (and refused)", got, reviews)
	}
}

// TestOneTokenReadingTwoRuleSets: a token that holds two audiences, read
// for each in turn, is reviewed once for each, not at every read.
func TestOneTokenReadingTwoRuleSets(t *testing.T) {
	r, _, _ := newReviewer(Options{})
	reviews := 0
	r.tokens = tokenReviewerFunc(func(tr *authenticationv1.TokenReview) {
		reviews++
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences[1:],
			User: authenticationv1.UserInfo{Username: "proxy"}}
	})
	for range 5 {
		for _, rs := range []string{"cache/ns/a", "cache/ns/b"} {
			if got := authenticate(t, r, "tok", "cache", rs); got != "proxy" {
				t.Fatalf("%s: user %q", rs, got)
			}
		}
	}
	if reviews != 2 {
		t.Errorf("ten reads of two rule sets with one token: %d reviews, want 2", reviews)
	}
}

// tokenReviewerFunc answers a TokenReview by filling in its copy's status.
type tokenReviewerFunc func(*authenticationv1.TokenReview)

func (f tokenReviewerFunc) Create(_ context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	out := tr.DeepCopy()
	f(out)
	return out, nil
}

// TestTokenEntryIsBounded: a token holding any number of audiences, of any
// length, read for each in turn, keeps at most maxAudiences fixed-size
// digests in its entry, the latest among them.
func TestTokenEntryIsBounded(t *testing.T) {
	r, _, _ := newReviewer(Options{})
	r.tokens = tokenReviewerFunc(func(tr *authenticationv1.TokenReview) {
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
			User: authenticationv1.UserInfo{Username: "proxy"}}
	})
	long := strings.Repeat("x", 4096)
	var last string
	for i := range 1000 {
		last = long + strconv.Itoa(i)
		if got := authenticate(t, r, "tok", last); got != "proxy" {
			t.Fatalf("audience %d: user %q", i, got)
		}
	}
	for name, c := range map[string]interface{ Get(any) (any, bool) }{"trusted": r.trusted, "known": r.known} {
		v, ok := c.Get(sha256.Sum256([]byte("tok")))
		if !ok {
			t.Fatalf("no %s entry for the token", name)
		}
		if auds := v.(token).audiences; len(auds) > maxAudiences || !v.(token).answers([]string{last}) {
			t.Errorf("%s entry after 1,000 audiences: %d digests, answers the latest %v; want at most %d, true", name, len(auds), v.(token).answers([]string{last}), maxAudiences)
		}
	}
}
