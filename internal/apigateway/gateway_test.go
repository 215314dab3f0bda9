package apigateway_test

import (
	"slices"
	"testing"

	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway/ratelimit"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

func apiGateway(name, gwName string) *gatewayv1alpha1.APIGateway {
	return &gatewayv1alpha1.APIGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gatewayv1alpha1.APIGatewaySpec{Gateway: gatewayv1alpha1.DefaultGateway{
			Name: gwName, Namespace: "gw-system", Hosts: []gatewayv1alpha1.Host{"*.life.example.com"},
			CredentialName: ptr.To("life-tls"), HTTPSRedirect: true,
			Selector: map[string]string{"istio": "life-ingress"},
		}},
	}
}

// TestAPIGatewayLifecycle: the oldest APIGateway runs its Istio Gateway and
// the others wait in state Warning; deleting it is blocked while an
// APIRule, a RateLimit or a VirtualService uses the gateway, then removes
// the gateway, and the next oldest takes over.
func TestAPIGatewayLifecycle(t *testing.T) {
	ctx := setup(t)
	namespace(t, ctx, "gw-system")
	first, second := apiGateway("first", "life-gateway"), apiGateway("second", "second-gateway")
	if err := k8s.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, first, gatewayv1alpha1.StateReady)
	gw := &networkingv1.Gateway{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "gw-system", Name: "life-gateway"}, gw); err != nil {
		t.Fatal(err)
	}
	if len(gw.Spec.Servers) != 2 {
		t.Fatalf("servers %v, want HTTPS and HTTP", gw.Spec.Servers)
	}
	https, http := gw.Spec.Servers[0], gw.Spec.Servers[1]
	if https.Port.Number != 443 || https.Tls.GetMode() != networkingapi.ServerTLSSettings_SIMPLE || https.Tls.GetCredentialName() != "life-tls" ||
		http.Port.Number != 80 || !http.Tls.GetHttpsRedirect() || !slices.Equal(http.Hosts, []string{"*.life.example.com"}) {
		t.Fatalf("the Istio Gateway is not HTTPS with life-tls plus an HTTP redirect: %v", gw.Spec.Servers)
	}

	if err := k8s.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, second, gatewayv1alpha1.StateWarning)
	if second.Status.Reason != gatewayv1alpha1.ReasonOlderAPIGatewayExists {
		t.Fatalf("second APIGateway: reason %q", second.Status.Reason)
	}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "gw-system", Name: "second-gateway"}, &networkingv1.Gateway{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the second APIGateway made a gateway: %v", err)
	}

	// Users of the gateway.
	ns := namespace(t, ctx, "gw-users")
	workload(t, ctx, ns, "app", 8000, true, nil)
	api := simpleRule(ns, "app", "gw-system/life-gateway", "app", "app.life.example.com")
	vs := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-hand"}}
	vs.Spec.Hosts, vs.Spec.Gateways = []string{"hand.life.example.com"}, []string{"gw-system/life-gateway"}
	rl := &gatewayv1alpha1.RateLimit{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}, Spec: gatewayv1alpha1.RateLimitSpec{
		SelectorLabels: map[string]string{"istio": "life-ingress"},
		Local:          gatewayv1alpha1.LocalConfig{DefaultBucket: gatewayv1alpha1.BucketSpec{MaxTokens: 10, TokensPerFill: 10, FillInterval: metav1.Duration{Duration: 1e9}}},
	}}
	users := []client.Object{api, vs, rl}
	for _, o := range users {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitState(t, ctx, api, gatewayv1alpha1.StateReady)

	if err := k8s.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, first, gatewayv1alpha1.StateWarning)
	if first.Status.Reason != gatewayv1alpha1.ReasonDeletionBlocked {
		t.Fatalf("reason %q: %s", first.Status.Reason, first.Status.Description)
	}
	want := []gatewayv1alpha1.ObjectReference{{Kind: "APIRule", Namespace: ns, Name: "app"}, {Kind: "RateLimit", Namespace: ns, Name: "edge"}, {Kind: "VirtualService", Namespace: ns, Name: "by-hand"}}
	if !slices.Equal(first.Status.BlockingResources, want) {
		t.Fatalf("blockingResources %v, want %v", first.Status.BlockingResources, want)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
		t.Fatalf("the gateway went while in use: %v", err)
	}

	for _, o := range users {
		if err := k8s.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	gone(t, ctx, first)
	gone(t, ctx, gw)
	waitState(t, ctx, second, gatewayv1alpha1.StateReady)
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "gw-system", Name: "second-gateway"}, &networkingv1.Gateway{}); err != nil {
		t.Fatalf("the next APIGateway did not take over: %v", err)
	}
	if err := k8s.Delete(ctx, second); err != nil {
		t.Fatal(err)
	}
	gone(t, ctx, second)
}

func rateLimit(ns, name string, sel map[string]string) *gatewayv1alpha1.RateLimit {
	return &gatewayv1alpha1.RateLimit{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: gatewayv1alpha1.RateLimitSpec{
		SelectorLabels: sel,
		Local:          gatewayv1alpha1.LocalConfig{DefaultBucket: gatewayv1alpha1.BucketSpec{MaxTokens: 10, TokensPerFill: 10, FillInterval: metav1.Duration{Duration: 1e9}}},
	}}
}

// TestRateLimitOnePerWorkload: a second RateLimit for the same pods is
// refused with reason Conflict and writes nothing; it takes over when the
// first goes.
func TestRateLimitOnePerWorkload(t *testing.T) {
	ctx := setup(t)
	ns := namespace(t, ctx, "rl-conflict")
	workload(t, ctx, ns, "api", 8000, true, map[string]string{"tier": "web"})
	first := rateLimit(ns, "first", map[string]string{"app": "api"})
	if err := k8s.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, first, gatewayv1alpha1.StateReady)
	second := rateLimit(ns, "second", map[string]string{"tier": "web"})
	if err := k8s.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, second, gatewayv1alpha1.StateError)
	if reasonOf(st) != gatewayv1alpha1.ReasonConflict {
		t.Fatalf("reason %q: %s", reasonOf(st), st.Description)
	}
	ef := &networkingv1alpha3.EnvoyFilter{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ratelimit.Name(second)}, ef); !apierrors.IsNotFound(err) {
		t.Fatalf("the conflicting RateLimit wrote an EnvoyFilter: %v", err)
	}
	if err := k8s.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	gone(t, ctx, first)
	devtest.Eventually(t, "the first RateLimit's EnvoyFilter to go", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ratelimit.Name(first)}, ef))
	})
	waitState(t, ctx, second, gatewayv1alpha1.StateReady)
}

// TestRateLimitWithoutPodsOrSidecar: a RateLimit that selects nothing is a
// Warning, one on pods without a sidecar an Error.
func TestRateLimitWithoutPodsOrSidecar(t *testing.T) {
	ctx := setup(t)
	ns := namespace(t, ctx, "rl-pods")
	workload(t, ctx, ns, "bare", 8000, false, nil)
	none := rateLimit(ns, "none", map[string]string{"app": "nothing"})
	bare := rateLimit(ns, "bare", map[string]string{"app": "bare"})
	for _, o := range []client.Object{none, bare} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if st := waitState(t, ctx, none, gatewayv1alpha1.StateWarning); reasonOf(st) != gatewayv1alpha1.ReasonNoMatchingPods {
		t.Fatalf("reason %q", reasonOf(st))
	}
	if st := waitState(t, ctx, bare, gatewayv1alpha1.StateError); reasonOf(st) != gatewayv1alpha1.ReasonNoSidecar {
		t.Fatalf("reason %q", reasonOf(st))
	}
}
