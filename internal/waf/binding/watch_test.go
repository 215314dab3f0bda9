package binding_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// awaitedWithin bounds how long the binding controller may take to notice
// an object a policy waits for. It has no timer at all: only its watches
// bring it back. The margin is for a loaded test machine.
const awaitedWithin = 10 * time.Second

// TestPolicyReactsToLateObjects: a policy applied before everything it
// names (its Gateway, its RuleSet, the routes it guards, a route it
// targets) is resolved as each appears.
func TestPolicyReactsToLateObjects(t *testing.T) {
	start(t)
	ns := namespace(t, "late")
	policy(t, ns, "p", "Gateway", []string{"gw"}, "", "rules")
	policy(t, ns, "cart-policy", "GRPCRoute", []string{"cart"}, "", "rules")
	eventually(t, "TargetNotFound for the missing Gateway and GRPCRoute", func() bool {
		return hasReason(ancestorCondition(t, ns, "p", "gw", "Accepted"), metav1.ConditionFalse, string(gatewayv1.PolicyReasonTargetNotFound)) &&
			hasReason(ancestorCondition(t, ns, "cart-policy", "cart", "Accepted"), metav1.ConditionFalse, string(gatewayv1.PolicyReasonTargetNotFound))
	})

	gateway(t, ns, "gw", "")
	waitFor(t, awaitedWithin, "the policy Accepted once its Gateway exists, its RuleSet still missing", func() bool {
		return hasReason(ancestorCondition(t, ns, "p", "gw", "Accepted"), metav1.ConditionTrue, "Accepted") &&
			hasReason(ancestorCondition(t, ns, "p", "gw", "ResolvedRefs"), metav1.ConditionFalse, wafv1alpha1.ReasonInvalidRef)
	})

	// ruleSet returns once the rule set is compiled and cached.
	ruleSet(t, ns, "rules", baseRules, nil)
	waitFor(t, awaitedWithin, "the reference resolved once the RuleSet exists", func() bool {
		return hasReason(ancestorCondition(t, ns, "p", "gw", "ResolvedRefs"), metav1.ConditionTrue, "ResolvedRefs")
	})

	httpRoute(t, ns, "web", ns, "gw", "", "/")
	waitFor(t, awaitedWithin, "the new HTTPRoute in the Gateway's table under the policy", func() bool {
		p, rs := routePolicy(table(ns, "gw"), "HTTPRoute/"+ns+"/web")
		return p == ns+"/p" && rs == ns+"/rules"
	})

	svc, method := "shop.Cart", "Add"
	create(t, &gatewayv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cart"},
		Spec: gatewayv1.GRPCRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules:           []gatewayv1.GRPCRouteRule{{Matches: []gatewayv1.GRPCRouteMatch{{Method: &gatewayv1.GRPCMethodMatch{Service: &svc, Method: &method}}}}},
		}})
	waitFor(t, awaitedWithin, "the route-level policy Accepted once its GRPCRoute exists", func() bool {
		p, _ := routePolicy(table(ns, "gw"), "GRPCRoute/"+ns+"/cart")
		return p == ns+"/cart-policy" &&
			hasReason(ancestorCondition(t, ns, "cart-policy", "cart", "Accepted"), metav1.ConditionTrue, "Accepted")
	})
}
