package apigateway_test

import (
	"strings"
	"testing"
	"time"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// TestAPIRuleWildcardAndExactHostsConflict: Envoy routes a request to an
// exact domain before a wildcard, and to a longer wildcard before a shorter
// one, so a newer APIRule for shop.example.com would take the requests an
// older *.example.com serves. Hosts that overlap are one claim under "the
// oldest claim wins", in both directions; a wildcard matches any number of
// labels, and not its own domain.
func TestAPIRuleWildcardAndExactHostsConflict(t *testing.T) {
	ctx := setup(t)
	const gw = "istio-system/wild-gateway"
	istioGateway(t, ctx, "istio-system", "wild-gateway", "*.wild.example.net")
	owner, tenant := namespace(t, ctx, "wild-owner"), namespace(t, ctx, "wild-tenant")
	workload(t, ctx, owner, "app", 8000, true, nil)
	workload(t, ctx, tenant, "app", 8000, true, nil)

	wild := simpleRule(owner, "wild", gw, "app", "*.shop.wild.example.net")
	if err := k8s.Create(ctx, wild); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, wild, gatewayv1alpha1.StateReady)
	// Younger by a second at least, so age alone decides.
	devtest.Eventually(t, "the next second", func() bool { return time.Now().After(wild.CreationTimestamp.Add(time.Second)) })

	// Each younger claim is refused, then deleted: a refused APIRule still
	// claims its hosts against younger ones.
	for _, c := range []struct{ name, host string }{
		{"exact", "cart.shop.wild.example.net"},
		{"two-labels", "a.b.shop.wild.example.net"},
		{"narrower", "*.eu.shop.wild.example.net"},
		{"wider", "*.wild.example.net"},
		{"mixed-case", "Cart.SHOP.wild.example.net"},
	} {
		theirs := simpleRule(tenant, c.name, gw, "app", c.host)
		if err := k8s.Create(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		st := waitState(t, ctx, theirs, gatewayv1alpha1.StateError)
		if reasonOf(st) != gatewayv1alpha1.ReasonHostInUse || !strings.Contains(st.Description, "*.shop.wild.example.net") || !strings.Contains(st.Description, owner+"/wild") {
			t.Errorf("%s: reason %q, description %q; want HostInUse naming *.shop.wild.example.net and %s/wild", c.host, reasonOf(st), st.Description, owner)
		}
		if vs := virtualServicesOf(t, theirs); len(vs) != 0 {
			t.Errorf("%s: the younger APIRule got a VirtualService for %v", c.host, vs[0].Spec.Hosts)
		}
		if err := k8s.Delete(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		gone(t, ctx, theirs)
	}
	// The wildcard's own domain, and a sibling, are not under it.
	for name, host := range map[string]string{"apex": "shop.wild.example.net", "sibling": "shopping.wild.example.net"} {
		ok := simpleRule(tenant, name, gw, "app", host)
		if err := k8s.Create(ctx, ok); err != nil {
			t.Fatal(err)
		}
		waitState(t, ctx, ok, gatewayv1alpha1.StateReady)
	}
	if vs := virtualServicesOf(t, wild); len(vs) != 1 {
		t.Fatalf("the older wildcard APIRule has %d VirtualServices, want 1", len(vs))
	}
	held := simpleRule(tenant, "held", gw, "app", "cart.shop.wild.example.net")
	if err := k8s.Create(ctx, held); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, held, gatewayv1alpha1.StateError)

	// The other way round: an older exact host refuses a younger wildcard.
	young := simpleRule(owner, "young-wild", gw, "app", "*.other.example.net")
	exact := simpleRule(tenant, "exact-first", gw, "app", "api.other.example.net")
	if err := k8s.Create(ctx, exact); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, exact, gatewayv1alpha1.StateReady)
	devtest.Eventually(t, "the next second", func() bool { return time.Now().After(exact.CreationTimestamp.Add(time.Second)) })
	if err := k8s.Create(ctx, young); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, young, gatewayv1alpha1.StateError)
	if reasonOf(st) != gatewayv1alpha1.ReasonHostInUse || !strings.Contains(st.Description, "api.other.example.net") {
		t.Fatalf("younger wildcard: reason %q, description %q; want HostInUse naming api.other.example.net", reasonOf(st), st.Description)
	}

	// When the wildcard goes, the exact host it held is free: the refused
	// APIRule is reconciled at once, not at its next retry.
	if err := k8s.Delete(ctx, wild); err != nil {
		t.Fatal(err)
	}
	gone(t, ctx, wild)
	waitState(t, ctx, held, gatewayv1alpha1.StateReady)
}
