package forward_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/forward"
)

type countingReviewer struct{ calls int }

func (c *countingReviewer) Create(_ context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	c.calls++
	tr.Status.Authenticated = true
	tr.Status.User.Username = "system:serviceaccount:other:sa"
	return tr, nil
}

type leading struct{}

func (leading) Leading() bool              { return true }
func (leading) Accept(v core.Verdict) bool { return true }

// A caller cannot make the API server review an oversized token: one past
// MaxTokenBytes is refused before any TokenReview; one within it is
// reviewed (and here refused as another ServiceAccount).
func TestReceiverBoundsTokensBeforeReview(t *testing.T) {
	tokens := &countingReviewer{}
	rc, err := forward.NewReceiver(forward.ReceiverOptions{
		Tokens: tokens, Allowed: "system:serviceaccount:portal:portal", Local: leading{},
		Rules: func(forward.RuleRef) *core.Rule { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token       string
		code, calls int
	}{
		{strings.Repeat("a", forward.MaxTokenBytes+1), http.StatusUnauthorized, 0},
		{strings.Repeat("a", forward.MaxTokenBytes), http.StatusForbidden, 1},
	} {
		req := httptest.NewRequest(http.MethodPost, "/forward/verdicts", strings.NewReader(`{"verdicts":[]}`))
		req.Header.Set("Authorization", "Bearer "+tc.token)
		rec := httptest.NewRecorder()
		rc.ServeHTTP(rec, req)
		if rec.Code != tc.code || tokens.calls != tc.calls {
			t.Errorf("token of %d bytes: HTTP %d after %d TokenReviews, want %d after %d", len(tc.token), rec.Code, tokens.calls, tc.code, tc.calls)
		}
	}
}

// reviewer authenticates the token "replica" as Portal's ServiceAccount and
// every other as another's, counting the reviews.
type reviewer struct{ calls int }

func (c *reviewer) Create(_ context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	c.calls++
	tr.Status.Authenticated = true
	tr.Status.User.Username = "system:serviceaccount:tenant:sa"
	if tr.Spec.Token == "replica" {
		tr.Status.User.Username = "system:serviceaccount:portal:portal"
	}
	return tr, nil
}

// TestFloodKeepsNoReplicaOut: anyone who reaches the webhook port (with
// --webhook-client-ca-file, every path but this one wants the API server's
// certificate) floods the endpoint with requests without a token and with
// new tokens. The replicas' token, reviewed once, is served throughout;
// the flood's TokenReviews stay within the rate's burst.
func TestFloodKeepsNoReplicaOut(t *testing.T) {
	tokens := &reviewer{}
	rc, err := forward.NewReceiver(forward.ReceiverOptions{
		Tokens: tokens, Allowed: "system:serviceaccount:portal:portal", Local: leading{},
		Rules: func(forward.RuleRef) *core.Rule { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	post := func(token string) int {
		req := httptest.NewRequest(http.MethodPost, "/forward/verdicts", strings.NewReader(`{"verdicts":[]}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		rc.ServeHTTP(rec, req)
		return rec.Code
	}
	if got := post("replica"); got != http.StatusOK {
		t.Fatalf("the replicas' token: HTTP %d, want 200", got)
	}
	start := time.Now()
	limited := 0
	for i := range 1000 {
		post("")
		if post(fmt.Sprintf("tenant-%d", i)) == http.StatusTooManyRequests {
			limited++
		}
		if i%100 == 0 {
			if got := post("replica"); got != http.StatusOK {
				t.Fatalf("the replicas' token after %d flooding requests: HTTP %d, want 200", 2*i, got)
			}
		}
	}
	if limited == 0 {
		t.Error("1,000 new tokens at once: none refused for the rate, want most")
	}
	budget := forward.DefaultRequestBurst + 1 + int(time.Since(start).Seconds()*forward.DefaultRequestRate) + 1
	if tokens.calls > budget {
		t.Errorf("%d TokenReviews for the flood, want at most %d (the burst and the rate)", tokens.calls, budget)
	}
}
