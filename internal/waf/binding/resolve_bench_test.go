package binding

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

// BenchmarkResolveAndServe is the compute part of a policy change: every
// table of 50 Gateways with 1,000 HTTPRoutes and policies at both levels
// recomputed and put in the cache (no API server).
func BenchmarkResolveAndServe(b *testing.B) {
	s := &Snapshot{Revision: func(string) (string, bool) { return "rev", true }}
	for _, name := range []string{"base", "strict"} {
		s.RuleSets = append(s.RuleSets, &wafv1alpha1.RuleSet{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name}})
	}
	for g := range 50 {
		gwName := fmt.Sprintf("gw-%d", g)
		s.Gateways = append(s.Gateways, gw("a", gwName))
		s.Policies = append(s.Policies, &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p-" + gwName},
			Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Name: "base"},
				TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: "Gateway", Name: gatewayv1.ObjectName(gwName)}}}})
		for r := range 20 {
			rt := hr("a", fmt.Sprintf("r-%d-%d", g, r), r, []string{fmt.Sprintf("app%d.example.com", r)}, pathMatch(gatewayv1.PathMatchPathPrefix, fmt.Sprintf("/svc%d", r)))
			rt.Spec.ParentRefs[0].Name = gatewayv1.ObjectName(gwName)
			s.HTTPRoutes = append(s.HTTPRoutes, rt)
			if r%10 == 0 {
				s.Policies = append(s.Policies, &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p-" + rt.Name},
					Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Name: "strict"},
						TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Name: gatewayv1.ObjectName(rt.Name)}}}})
			}
		}
	}
	c := cache.New(nil, nil)
	for b.Loop() {
		res := Resolve(s)
		for gw, t := range res.Tables {
			if _, err := c.PutTable(gw.Namespace, gw.Name, t); err != nil {
				b.Fatal(err)
			}
		}
	}
}
