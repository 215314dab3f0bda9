package cache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// reviewer answers TokenReviews as an API server would for ServiceAccount
// tokens "<namespace>:<name>:<audience>", counting calls; fail makes it
// unreachable. Pure unit tests of the decision cache; the API server's own
// answers are tested in internal/waf.
type reviewer struct {
	calls atomic.Int32
	fail  bool
	block chan struct{} // when set, the review of a token starting "forged" waits for it to close
	in    chan struct{} // when set, such a review says it has begun
}

func (r *reviewer) Create(ctx context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	r.calls.Add(1)
	if r.block != nil && strings.HasPrefix(tr.Spec.Token, "forged") {
		r.in <- struct{}{}
		select {
		case <-r.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if r.fail {
		return nil, errors.New("connection refused")
	}
	parts := strings.Split(tr.Spec.Token, ":")
	out := tr.DeepCopy()
	if len(parts) == 3 && (parts[2] == tr.Spec.Audiences[0] || parts[2] == tr.Spec.Audiences[1]) {
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{parts[2]},
			User: authenticationv1.UserInfo{Username: "system:serviceaccount:" + parts[0] + ":" + parts[1]}}
	}
	return out, nil
}

type denyAll struct{ calls atomic.Int32 }

func (d *denyAll) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	d.calls.Add(1)
	return sar, nil
}

// TestKubeAuthorizerDecisionCache: decisions are reused until their TTL
// ends, the cache holds at most its size, and an API error is never
// remembered.
func TestKubeAuthorizerDecisionCache(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tokens, access := &reviewer{}, &denyAll{}
	m := NewMetrics(prometheus.NewRegistry())
	a := newKubeAuthorizer(tokens, access, 2, m, clk)
	ctx := context.Background()
	decide := func(token, ns string) Decision {
		t.Helper()
		d, err := a.Authorize(ctx, token, ns, "rs")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	own := "team-a:proxy:" + Audience
	if d := decide(own, "team-a"); !d.Allowed {
		t.Fatalf("own namespace: %+v", d)
	}
	if d := decide(own, "team-b"); d.Allowed || d.Reason != DenyForbidden || access.calls.Load() != 1 {
		t.Fatalf("other namespace: %+v after %d access reviews", d, access.calls.Load())
	}
	if d := decide("team-a:proxy:https://kubernetes.default.svc", "team-a"); d.Allowed || d.Reason != DenyUnauthenticated {
		t.Fatalf("API server audience: %+v", d)
	}
	if d := decide("team-a:proxy:"+RuleSetAudience("team-a", "rs"), "team-a"); !d.Allowed {
		t.Fatalf("rule set audience: %+v", d)
	}
	calls := int(tokens.calls.Load())
	decide("team-a:proxy:"+RuleSetAudience("team-a", "rs"), "team-a")
	if d := decide(own, "team-a"); !d.Allowed || int(tokens.calls.Load()) != calls {
		t.Fatalf("cached decisions were reviewed again: %d more reviews", int(tokens.calls.Load())-calls)
	}
	if d := decide("team-d:proxy:"+Audience, "team-d"); !d.Allowed {
		t.Fatalf("a third token: %+v", d)
	}
	calls = int(tokens.calls.Load())
	// Size 2: the least recently used token, the per-rule-set one, was
	// evicted by the third.
	decide("team-a:proxy:"+RuleSetAudience("team-a", "rs"), "team-a")
	if int(tokens.calls.Load()) != calls+1 {
		t.Fatalf("%d reviews, want an evicted decision reviewed again", int(tokens.calls.Load())-calls)
	}
	clk.Step(DefaultAllowTTL + time.Second)
	decide(own, "team-a")
	if int(tokens.calls.Load()) != calls+2 {
		t.Fatal("an expired decision was reused")
	}
	tokens.fail = true
	if _, err := a.Authorize(ctx, "team-c:proxy:"+Audience, "team-c", "rs"); err == nil {
		t.Fatal("an unreachable API server gave a decision")
	}
	tokens.fail = false
	if d := decide("team-c:proxy:"+Audience, "team-c"); !d.Allowed {
		t.Fatalf("after the API server came back: %+v", d)
	}
	if got := testutil.ToFloat64(m.Reviews.WithLabelValues("token", "error")); got != 1 {
		t.Fatalf("reviews{token,error} = %v", got)
	}
}

func TestServiceAccount(t *testing.T) {
	for in, want := range map[string][2]string{
		"system:serviceaccount:ns:name": {"ns", "name"},
		"system:serviceaccount:ns":      {},
		"system:serviceaccount::name":   {},
		"system:serviceaccount:ns:":     {},
		"system:serviceaccount:a:b:c":   {},
		"alice":                         {},
		"system:node:ns:name":           {},
	} {
		ns, name, ok := ServiceAccount(in)
		if ok != (want[0] != "") || ns != want[0] || name != want[1] {
			t.Errorf("%q: %q %q %v, want %q", in, ns, name, ok, want)
		}
	}
}

// TestCredentialFiles: the token file is read per call and trimmed; an
// empty or missing file is an error that names it. A CA file without a
// certificate is refused.
func TestCredentialFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	token := TokenFile(path)
	if _, err := token(); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("missing file: %v", err)
	}
	for content, want := range map[string]string{"first\n": "first", "  second  ": "second"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := token(); err != nil || got != want {
			t.Fatalf("token %q %v, want %q", got, err, want)
		}
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := token(); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: %v", err)
	}
	if _, err := NewCATransport(path); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("CA file without a certificate: %v", err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, maxCredentialFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := TokenFile(big)(); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized file: %v", err)
	}
}
