package apigateway_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway/apirule"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// simpleRule is an open APIRule for svc on hosts through gateway.
func simpleRule(ns, name, gateway, svc string, hosts ...string) *gatewayv1alpha1.APIRule {
	api := &gatewayv1alpha1.APIRule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, h := range hosts {
		api.Spec.Hosts = append(api.Spec.Hosts, gatewayv1alpha1.Host(h))
	}
	api.Spec.Gateway = gateway
	api.Spec.Service = &gatewayv1alpha1.Service{Name: svc, Port: 8000}
	api.Spec.Rules = []gatewayv1alpha1.Rule{{Path: "/{**}", NoAuth: ptr.To(true)}}
	return api
}

// virtualServicesOf lists the VirtualServices generated for an APIRule.
func virtualServicesOf(t *testing.T, api *gatewayv1alpha1.APIRule) []*networkingv1.VirtualService {
	t.Helper()
	l := &networkingv1.VirtualServiceList{}
	if err := k8s.List(t.Context(), l, client.InNamespace(api.Namespace), client.MatchingLabels{apirule.LabelAPIRule: api.Name}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// TestAPIRuleCrossNamespaceServiceRefused: a tenant who may create APIRules
// in their namespace must not expose a Service of another namespace through
// the shared gateway (and its authorization).
func TestAPIRuleCrossNamespaceServiceRefused(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	attacker, victim := namespace(t, ctx, "xns-attacker"), namespace(t, ctx, "xns-victim")
	workload(t, ctx, victim, "payments", 8000, true, nil)
	workload(t, ctx, attacker, "web", 8000, true, nil)

	api := simpleRule(attacker, "steal", "istio-system/tenants-gateway", "payments", "steal.tenants.example.com")
	api.Spec.Service.Namespace = ptr.To(victim)
	if err := k8s.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, ctx, api, gatewayv1alpha1.StateError)
	if reasonOf(st) != gatewayv1alpha1.ReasonCrossNamespaceService || !strings.Contains(st.Description, victim) {
		t.Fatalf("reason %q, description %q; want CrossNamespaceService naming %s", reasonOf(st), st.Description, victim)
	}
	if vs := virtualServicesOf(t, api); len(vs) != 0 {
		t.Fatalf("a VirtualService was written for the refused APIRule: %v", vs[0].Spec.Http)
	}

	// The same through a rule's own service.
	api2 := simpleRule(attacker, "steal-rule", "istio-system/tenants-gateway", "web", "steal2.tenants.example.com")
	api2.Spec.Rules[0].Service = &gatewayv1alpha1.Service{Name: "payments", Namespace: ptr.To(victim), Port: 8000}
	if err := k8s.Create(ctx, api2); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, ctx, api2, gatewayv1alpha1.StateError); reasonOf(st) != gatewayv1alpha1.ReasonCrossNamespaceService {
		t.Fatalf("reason %q: %s", reasonOf(st), st.Description)
	}
}

// TestAPIRuleHostTakeoverRefused: a host that another namespace serves is
// not taken over, in any letter case, and the owner keeps serving it.
func TestAPIRuleHostTakeoverRefused(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	owner, attacker := namespace(t, ctx, "host-owner"), namespace(t, ctx, "host-attacker")
	workload(t, ctx, owner, "shop", 8000, true, nil)
	workload(t, ctx, attacker, "phish", 8000, true, nil)

	mine := simpleRule(owner, "shop", "istio-system/tenants-gateway", "shop", "shop.tenants.example.com")
	if err := k8s.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, mine, gatewayv1alpha1.StateReady)

	for i, host := range []string{"shop.tenants.example.com", "SHOP.Tenants.Example.com"} {
		id := string(rune('a' + i))
		theirs := simpleRule(attacker, "phish-"+id, "istio-system/tenants-gateway", "phish", "other-"+id+".tenants.example.com", host)
		if err := k8s.Create(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		st := waitState(t, ctx, theirs, gatewayv1alpha1.StateError)
		if reasonOf(st) != gatewayv1alpha1.ReasonHostInUse || !strings.Contains(st.Description, "shop.tenants.example.com") {
			t.Fatalf("host %s: reason %q, description %q; want HostInUse", host, reasonOf(st), st.Description)
		}
		if vs := virtualServicesOf(t, theirs); len(vs) != 0 {
			t.Fatalf("host %s: the attacker got a VirtualService for %v", host, vs[0].Spec.Hosts)
		}
	}
	if vs := virtualServicesOf(t, mine); len(vs) != 1 || vs[0].Spec.Hosts[0] != "shop.tenants.example.com" {
		t.Fatalf("the owner's VirtualService: %v", vs)
	}

	// A VirtualService nobody generated holds its host as well.
	other := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: attacker, Name: "hand-made"}}
	other.Spec.Hosts = []string{"hand.tenants.example.com"}
	other.Spec.Gateways = []string{"istio-system/tenants-gateway"}
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	late := simpleRule(owner, "late", "istio-system/tenants-gateway", "shop", "hand.tenants.example.com")
	if err := k8s.Create(ctx, late); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, ctx, late, gatewayv1alpha1.StateError); reasonOf(st) != gatewayv1alpha1.ReasonHostInUse {
		t.Fatalf("reason %q: %s", reasonOf(st), st.Description)
	}
}

// TestAPIRuleOldestClaimWins: when an older APIRule claims a host that a
// younger one already serves, the older wins and the younger loses its
// VirtualService, whichever was reconciled first.
func TestAPIRuleOldestClaimWins(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	a, b := namespace(t, ctx, "claim-old"), namespace(t, ctx, "claim-young")
	workload(t, ctx, a, "app", 8000, true, nil)
	workload(t, ctx, b, "app", 8000, true, nil)

	old := simpleRule(a, "app", "istio-system/tenants-gateway", "app", "first.tenants.example.com")
	if err := k8s.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, old, gatewayv1alpha1.StateReady)
	// Creation timestamps count seconds: the younger must be younger.
	devtest.Eventually(t, "the next second", func() bool { return time.Now().After(old.CreationTimestamp.Add(time.Second)) })
	young := simpleRule(b, "app", "istio-system/tenants-gateway", "app", "contested.tenants.example.com")
	if err := k8s.Create(ctx, young); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, young, gatewayv1alpha1.StateReady)

	devtest.Update(t, k8s, old, func() { old.Spec.Hosts = []gatewayv1alpha1.Host{"contested.tenants.example.com"} })
	waitState(t, ctx, old, gatewayv1alpha1.StateReady)
	st := waitState(t, ctx, young, gatewayv1alpha1.StateError)
	if reasonOf(st) != gatewayv1alpha1.ReasonHostInUse || !strings.Contains(st.Description, a+"/app") {
		t.Fatalf("younger APIRule: reason %q, description %q", reasonOf(st), st.Description)
	}
	devtest.Eventually(t, "the younger APIRule's VirtualService to go", func() bool { return len(virtualServicesOf(t, young)) == 0 })
}

// TestAPIRuleLifecycle: objects no rule needs are pruned, and deleting the
// APIRule deletes everything generated for it.
func TestAPIRuleLifecycle(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	ns := namespace(t, ctx, "lifecycle")
	workload(t, ctx, ns, "app", 8000, true, nil)
	api := simpleRule(ns, "app", "istio-system/tenants-gateway", "app", "life.tenants.example.com")
	api.Spec.Rules = append([]gatewayv1alpha1.Rule{{
		Path: "/private", Jwt: &gatewayv1alpha1.JwtConfig{Authentications: []gatewayv1alpha1.JwtAuthentication{{Issuer: "https://id.example.com", JwksURI: "https://id.example.com/keys"}}},
	}}, api.Spec.Rules...)
	if err := k8s.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, api, gatewayv1alpha1.StateReady)
	count := func(l client.ObjectList) int {
		if err := k8s.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{apirule.LabelAPIRule: api.Name}); err != nil {
			t.Fatal(err)
		}
		switch l := l.(type) {
		case *securityv1.AuthorizationPolicyList:
			return len(l.Items)
		case *securityv1.RequestAuthenticationList:
			return len(l.Items)
		case *networkingv1.VirtualServiceList:
			return len(l.Items)
		}
		return -1
	}
	if n, m := count(&securityv1.AuthorizationPolicyList{}), count(&securityv1.RequestAuthenticationList{}); n != 2 || m != 1 {
		t.Fatalf("%d AuthorizationPolicies and %d RequestAuthentications, want 2 and 1", n, m)
	}

	devtest.Update(t, k8s, api, func() { api.Spec.Rules = api.Spec.Rules[1:] })
	waitState(t, ctx, api, gatewayv1alpha1.StateReady)
	devtest.Eventually(t, "the JWT rule's objects to be pruned", func() bool {
		return count(&securityv1.AuthorizationPolicyList{}) == 1 && count(&securityv1.RequestAuthenticationList{}) == 0
	})

	if err := k8s.Delete(ctx, api); err != nil {
		t.Fatal(err)
	}
	gone(t, ctx, api)
	if n := count(&networkingv1.VirtualServiceList{}) + count(&securityv1.AuthorizationPolicyList{}); n != 0 {
		t.Fatalf("%d generated objects left after the APIRule was deleted", n)
	}
}

// TestAPIRuleNoSidecar: without a sidecar the policies would not apply and
// a JWT rule would let everyone in, so the APIRule is refused.
func TestAPIRuleNoSidecar(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	ns := namespace(t, ctx, "no-sidecar")
	workload(t, ctx, ns, "bare", 8000, false, nil)
	api := simpleRule(ns, "bare", "istio-system/tenants-gateway", "bare", "bare.tenants.example.com")
	if err := k8s.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, ctx, api, gatewayv1alpha1.StateError); reasonOf(st) != gatewayv1alpha1.ReasonNoSidecar {
		t.Fatalf("reason %q: %s", reasonOf(st), st.Description)
	}
}

// TestAPIRuleNameTaken: an object of a generated name that the APIRule does
// not own is left alone.
func TestAPIRuleNameTaken(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	ns := namespace(t, ctx, "name-taken")
	workload(t, ctx, ns, "app", 8000, true, nil)
	api := simpleRule(ns, "app", "istio-system/tenants-gateway", "app", "taken.tenants.example.com")
	objs, err := apirule.Generate(api, apirule.Facts{Hosts: []string{"x.example.com"}, Selectors: map[string]map[string]string{"app": {"app": "app"}}})
	if err != nil {
		t.Fatal(err)
	}
	squatter := &networkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: objs.VirtualService.Name}}
	squatter.Spec.Hosts = []string{"squat.internal"}
	if err := k8s.Create(ctx, squatter); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, ctx, api, gatewayv1alpha1.StateError); reasonOf(st) != gatewayv1alpha1.ReasonNameTaken {
		t.Fatalf("reason %q: %s", reasonOf(st), st.Description)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(squatter), squatter); err != nil || squatter.Spec.Hosts[0] != "squat.internal" {
		t.Fatalf("the existing VirtualService was changed: %v %v", err, squatter.Spec.Hosts)
	}
}

// TestExamples reconciles every file of examples/apirules: the APIGateway,
// then the APIRules and the RateLimit in namespace shop, all to Ready.
func TestExamples(t *testing.T) {
	ctx := setup(t)
	namespace(t, ctx, "portal-system")
	ns := namespace(t, ctx, "shop")
	for svc, port := range map[string]uint32{"orders": 8080, "orders-v2": 8080, "admin": 80} {
		workload(t, ctx, ns, svc, port, true, nil)
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "apirules", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	var gateways, others []client.Object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var obj client.Object
		switch u.GetKind() {
		case "APIGateway":
			obj = &gatewayv1alpha1.APIGateway{}
		case "APIRule":
			obj = &gatewayv1alpha1.APIRule{}
		case "RateLimit":
			obj = &gatewayv1alpha1.RateLimit{}
		default:
			t.Fatalf("%s: no test for kind %q", f, u.GetKind())
		}
		readYAML(t, f, obj)
		if u.GetKind() == "APIGateway" {
			gateways = append(gateways, obj)
			continue
		}
		obj.SetNamespace(ns)
		others = append(others, obj)
	}
	for _, o := range append(gateways, others...) {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		waitState(t, ctx, o, gatewayv1alpha1.StateReady)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, o := range others {
			_ = k8s.Delete(ctx, o)
			gone(t, ctx, o)
		}
		for _, g := range gateways {
			_ = k8s.Delete(ctx, g)
			gone(t, ctx, g)
		}
	})
	gw := &networkingv1.Gateway{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "portal-system", Name: "portal-gateway"}, gw); err != nil {
		t.Fatalf("the example APIGateway's Istio Gateway: %v", err)
	}
}
