package kubereview

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
}

func (r *tokens) Create(_ context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
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

// allowAll allows every access review.
type allowAll struct{}

func (allowAll) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	out := sar.DeepCopy()
	out.Status.Allowed = true
	return out, nil
}

func newReviewer(opts Options) (*Reviewer, *tokens, *clocktesting.FakeClock) {
	tk := &tokens{}
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	opts.Clock = clk
	return New(tk, allowAll{}, opts), tk, clk
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
	for name, c := range map[string]interface{ Keys() []any }{"trusted": r.trusted, "refused": r.refused, "known": r.known, "decisions": r.decisions} {
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
