package rule

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// TestServedAnswerKeptWhenTheLimiterRefuses: a kind found not served keeps
// that answer while the discovery limiter refuses asks, so Ready does not
// flap to True, and changes once an ask is made and the kind is served. The
// mapper is apimachinery's own, holding what discovery would have said.
func TestServedAnswerKeptWhenTheLimiterRefuses(t *testing.T) {
	ctx := context.Background()
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "apps", Version: "v1"}, {Group: "app", Version: "v1"}})
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	l := NewCRLoader(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	l.mapper = mapper
	gvks := []policyv1alpha1.GroupVersionKind{{Group: "app", Kind: "Deployment"}}
	c := &servedCheck{gvks: gvks, problems: make([]string, 1), unasked: make([]bool, 1)}

	if !l.checkServed(ctx, c, false, nil) {
		t.Fatal("the first answer about Deployment.app was not a change")
	}
	const want = "match.gvk[0]: Deployment.app is not served by the API server (Deployment is served in group apps); the rule applies once it is"
	if got := c.notServed(); len(got) != 1 || got[0] != want {
		t.Fatalf("not served: %q, want [%q]", got, want)
	}

	// The kind becomes served, but no ask may be made: the answer stays.
	mapper.Add(schema.GroupVersionKind{Group: "app", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	l.discoveryAsks = rate.NewLimiter(0, 0)
	if l.checkServed(ctx, c, false, nil) {
		t.Error("a refused ask changed the answer")
	}
	if got := c.notServed(); len(got) != 1 || !c.pending() {
		t.Errorf("after a refused ask: not served %q, pending %v; want the last answer kept and asked again later", got, c.pending())
	}

	l.discoveryAsks = rate.NewLimiter(rate.Inf, 1)
	if !l.checkServed(ctx, c, false, nil) || len(c.notServed()) != 0 || c.pending() {
		t.Errorf("once asked: not served %q, pending %v; want served", c.notServed(), c.pending())
	}
}
