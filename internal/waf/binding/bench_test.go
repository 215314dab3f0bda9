package binding_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

// Shape of the benchmark: 50 Gateways with 20 HTTPRoutes each; four
// Gateway-level policies of 16 (and 2) Gateways; a Route-level policy on
// every tenth route.
const (
	benchGateways       = 50
	benchRoutesPerGW    = 20
	benchGatewaysPerPol = 16
)

// BenchmarkPolicyChangeToTables measures, on a real API server, the time
// from an update of a Gateway-level policy (its rule set swapped) to the
// route table the cache serves reflecting it for every Gateway the policy
// affects (16 of 50), with 1,000 HTTPRoutes and policies at both levels.
func BenchmarkPolicyChangeToTables(b *testing.B) {
	shared.Cluster(b)
	ctx := context.Background()
	ns := fmt.Sprintf("bench-%d", time.Now().UnixNano()%100000)
	setupBench(b, ctx, ns)
	var pol wafv1alpha1.WAFGatewayBindingPolicy
	key := client.ObjectKey{Namespace: ns, Name: "gw-policy-0"}
	sets := []string{"strict", "base"}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		want := sets[i%2]
		i++
		if err := env.Client.Get(ctx, key, &pol); err != nil {
			b.Fatal(err)
		}
		patch := client.MergeFrom(pol.DeepCopy())
		pol.Spec.RuleSet.Name = want
		if err := env.Client.Patch(ctx, &pol, patch); err != nil {
			b.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for g := range benchGatewaysPerPol {
				_, rs := routePolicy(table(ns, fmt.Sprintf("gw-%d", g)), fmt.Sprintf("HTTPRoute/%s/r-%d-1", ns, g))
				if rs != ns+"/"+want {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			b.Fatalf("tables did not follow the policy: %v", err)
		}
	}
	b.ReportMetric(benchGatewaysPerPol, "gateways/op")
}

func setupBench(b *testing.B, ctx context.Context, ns string) {
	b.Helper()
	mustCreate := func(o client.Object) {
		if err := env.Client.Create(ctx, o); err != nil {
			b.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	mustCreate(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	for name, rules := range map[string]string{"base": baseRules, "strict": strictRules} {
		mustCreate(&wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: wafv1alpha1.RuleSourceSpec{Rules: rules}})
		mustCreate(&wafv1alpha1.RuleSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: wafv1alpha1.RuleSetSpec{Sources: []wafv1alpha1.SourceReference{{Name: name}}}})
	}
	for g := range benchGateways {
		gwName := fmt.Sprintf("gw-%d", g)
		mustCreate(&gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gwName},
			Spec: gatewayv1.GatewaySpec{GatewayClassName: "example", Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}})
		for r := range benchRoutesPerGW {
			mustCreate(&gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("r-%d-%d", g, r)},
				Spec: gatewayv1.HTTPRouteSpec{
					CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: gatewayv1.ObjectName(gwName)}}},
					Hostnames:       []gatewayv1.Hostname{gatewayv1.Hostname(fmt.Sprintf("app%d.gw%d.example.com", r, g))},
					Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{
						Path: &gatewayv1.HTTPPathMatch{Type: ptr.To(gatewayv1.PathMatchPathPrefix), Value: ptr.To(fmt.Sprintf("/svc%d", r))}}}}},
				}})
		}
	}
	for p := 0; p*benchGatewaysPerPol < benchGateways; p++ {
		pol := &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("gw-policy-%d", p)},
			Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Name: "base"}}}
		for g := p * benchGatewaysPerPol; g < min((p+1)*benchGatewaysPerPol, benchGateways); g++ {
			pol.Spec.TargetRefs = append(pol.Spec.TargetRefs, gatewayv1.LocalPolicyTargetReference{Group: gatewayv1.GroupName, Kind: "Gateway", Name: gatewayv1.ObjectName(fmt.Sprintf("gw-%d", g))})
		}
		mustCreate(pol)
	}
	for g := range benchGateways {
		for r := 0; r < benchRoutesPerGW; r += 10 {
			mustCreate(&wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("route-policy-%d-%d", g, r)},
				Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Name: "strict"},
					TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Name: gatewayv1.ObjectName(fmt.Sprintf("r-%d-%d", g, r))}}}})
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		for g := range benchGateways {
			tb := table(ns, fmt.Sprintf("gw-%d", g))
			if tb == nil || len(tb.Rows) != benchRoutesPerGW {
				return false, nil
			}
			if _, rs := routePolicy(tb, fmt.Sprintf("HTTPRoute/%s/r-%d-1", ns, g)); rs != cache.Key(ns, "base") {
				return false, nil
			}
			if _, rs := routePolicy(tb, fmt.Sprintf("HTTPRoute/%s/r-%d-0", ns, g)); rs != cache.Key(ns, "strict") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		b.Fatalf("the benchmark's tables never settled: %v", err)
	}
}
