package forward_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
