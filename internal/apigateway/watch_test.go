package apigateway_test

import (
	"testing"
	"time"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway/apirule"
	"github.com/vilaca/portal/internal/apigateway/ratelimit"
)

// awaitedWithin bounds how long a controller may take to notice the object
// it waits for. The controllers used to look again after a minute; the
// watches take milliseconds, and the margin is for a loaded test machine.
const awaitedWithin = 10 * time.Second

// waitReason waits for obj's state and checks its reason.
func waitReason(t *testing.T, obj client.Object, state gatewayv1alpha1.State, reason string) {
	t.Helper()
	if st := waitState(t, t.Context(), obj, state); reasonOf(st) != reason {
		t.Fatalf("reason %q, want %s: %s", reasonOf(st), reason, st.Description)
	}
}

// TestAPIRuleReactsToItsService: an APIRule applied before its Service
// turns Ready when the Service is created, not on a timer.
func TestAPIRuleReactsToItsService(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	ns := namespace(t, ctx, "watch-service")
	api := simpleRule(ns, "early", "istio-system/tenants-gateway", "late", "watch-service.tenants.example.com")
	if err := k8s.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	waitReason(t, api, gatewayv1alpha1.StateError, gatewayv1alpha1.ReasonServiceNotFound)

	workload(t, ctx, ns, "late", 8000, true, nil)
	waitStateWithin(t, ctx, api, gatewayv1alpha1.StateReady, awaitedWithin)
	if len(virtualServicesOf(t, api)) != 1 {
		t.Fatal("Ready without its VirtualService")
	}
}

// TestAPIRuleReactsToItsGateway: an APIRule applied before its Istio
// Gateway turns Ready when the Gateway is created.
func TestAPIRuleReactsToItsGateway(t *testing.T) {
	ctx := setup(t)
	ns := namespace(t, ctx, "watch-gateway")
	workload(t, ctx, ns, "web", 8000, true, nil)
	api := simpleRule(ns, "early", "istio-system/late-gateway", "web", "watch-gateway.late.example.com")
	if err := k8s.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	waitReason(t, api, gatewayv1alpha1.StateError, gatewayv1alpha1.ReasonGatewayNotFound)

	istioGateway(t, ctx, "istio-system", "late-gateway", "*.late.example.com")
	waitStateWithin(t, ctx, api, gatewayv1alpha1.StateReady, awaitedWithin)
}

// TestAPIRuleReactsToSidecarPods: an APIRule refused because a pod of its
// Service runs without a sidecar turns Ready when that pod is replaced by
// one with a sidecar, as a restart after enabling injection does.
func TestAPIRuleReactsToSidecarPods(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	ns := namespace(t, ctx, "watch-sidecar")
	objs := workload(t, ctx, ns, "bare", 8000, false, nil)
	api := simpleRule(ns, "bare", "istio-system/tenants-gateway", "bare", "watch-sidecar.tenants.example.com")
	if err := k8s.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	waitReason(t, api, gatewayv1alpha1.StateError, gatewayv1alpha1.ReasonNoSidecar)

	bare := objs[1].(*corev1.Pod)
	if err := k8s.Delete(ctx, bare, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	gone(t, ctx, bare)
	injected := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bare-1", Namespace: ns, Labels: map[string]string{"app": "bare"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "bare", Image: "example.com/bare:1"}, {Name: "istio-proxy", Image: "example.com/proxyv2:1"},
		}},
	}
	if err := k8s.Create(ctx, injected); err != nil {
		t.Fatal(err)
	}
	waitStateWithin(t, ctx, api, gatewayv1alpha1.StateReady, awaitedWithin)
}

// TestRateLimitReactsToItsPods: a RateLimit that selects no pod yet writes
// its EnvoyFilter when a matching pod appears.
func TestRateLimitReactsToItsPods(t *testing.T) {
	ctx := setup(t)
	ns := namespace(t, ctx, "watch-ratelimit")
	rl := rateLimit(ns, "early", map[string]string{"app": "late"})
	if err := k8s.Create(ctx, rl); err != nil {
		t.Fatal(err)
	}
	waitReason(t, rl, gatewayv1alpha1.StateWarning, gatewayv1alpha1.ReasonNoMatchingPods)

	workload(t, ctx, ns, "late", 8000, true, nil)
	waitStateWithin(t, ctx, rl, gatewayv1alpha1.StateReady, awaitedWithin)
	ef := &networkingv1alpha3.EnvoyFilter{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ratelimit.Name(rl)}, ef); err != nil {
		t.Fatalf("Ready without its EnvoyFilter: %v", err)
	}
}

// TestAPIRuleReactsToForeignVirtualService: an APIRule refused because a
// hand-made VirtualService serves its host takes the host as soon as that
// VirtualService is deleted, also when it carries the labels of a generated
// one (anyone who may write one can copy them).
func TestAPIRuleReactsToForeignVirtualService(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	ns := namespace(t, ctx, "watch-foreign-vs")
	workload(t, ctx, ns, "web", 8000, true, nil)
	other := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hand-made",
		Labels: map[string]string{apirule.LabelManagedBy: "portal", apirule.LabelAPIRule: "someone-else"}}}
	other.Spec.Hosts = []string{"Foreign.Tenants.Example.com"}
	other.Spec.Gateways = []string{"istio-system/tenants-gateway"}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	api := simpleRule(ns, "web", "istio-system/tenants-gateway", "web", "foreign.tenants.example.com")
	if err := k8s.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	waitReason(t, api, gatewayv1alpha1.StateError, gatewayv1alpha1.ReasonHostInUse)

	if err := k8s.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	waitStateWithin(t, ctx, api, gatewayv1alpha1.StateReady, awaitedWithin)
}
