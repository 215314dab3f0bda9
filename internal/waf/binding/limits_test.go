package binding_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf/cache"
)

// wideRoute is an HTTPRoute at Gateway API's limits, attached to Gateway
// gwNS/gw: 16 hostnames and 128 exact path matches (two rules of 64), so
// 2,048 table rows.
func wideRoute(ns, name, gwNS, gw string) *gatewayv1.HTTPRoute {
	r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
			Name: gatewayv1.ObjectName(gw), Namespace: ptr.To(gatewayv1.Namespace(gwNS))}}}}}
	for h := range 16 {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gatewayv1.Hostname(fmt.Sprintf("h%d.%s.example.com", h, ns)))
	}
	for rule := range 2 {
		var ms []gatewayv1.HTTPRouteMatch
		for m := range 64 {
			ms = append(ms, gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: ptr.To(gatewayv1.PathMatchExact),
				Value: ptr.To(fmt.Sprintf("/%s/%d/%d", name, rule, m))}})
		}
		r.Spec.Rules = append(r.Spec.Rules, gatewayv1.HTTPRouteRule{Matches: ms})
	}
	return r
}

func rowsOf(tbl *cache.Table, route string) int {
	n := 0
	for _, r := range tbl.Rows {
		if r.Route == route {
			n++
		}
	}
	return n
}

// portalCondition returns condition typ of the Portal entry for Gateway
// gwNS/gw in the status of HTTPRoute ns/name; nil when there is none.
func portalCondition(t *testing.T, ns, name, gwNS, gw, typ string) *metav1.Condition {
	t.Helper()
	var r gatewayv1.HTTPRoute
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &r); err != nil {
		t.Fatal(err)
	}
	for _, p := range r.Status.Parents {
		if p.ControllerName == wafv1alpha1.BindingControllerName && string(p.ParentRef.Name) == gw &&
			p.ParentRef.Namespace != nil && string(*p.ParentRef.Namespace) == gwNS {
			return meta.FindStatusCondition(p.Conditions, typ)
		}
	}
	return nil
}

// One tenant attaches nine HTTPRoutes, each within Gateway API's limits,
// to a Gateway it shares with an older tenant: 18,433 rows, past the
// table's 16,384. The Gateway's table is still served, with the older
// tenant's route and as many of the newer routes as fit, oldest first
// (before, the table in force froze: the older tenant's updates never
// reached it); the two newest are left out, their Route status and their
// policy say why, naming the bound; when room is made, the oldest route
// left out joins.
func TestSharedGatewayTableLeavesOutNewestRoutes(t *testing.T) {
	start(t)
	infra := namespace(t, "infra")
	app := namespace(t, "app")
	evil := namespace(t, "evil")
	ruleSet(t, app, "base", baseRules, nil)
	ruleSet(t, evil, "base", baseRules, nil)
	gateway(t, infra, "gw", gatewayv1.NamespacesFromAll)
	victim := httpRoute(t, app, "web", infra, "gw", "web.example.com", "/")
	policy(t, app, "web-policy", "HTTPRoute", []string{"web"}, "", "base")
	// Creation timestamps have a one-second resolution: the tenant's
	// routes are created in a later second.
	waitFor(t, 5*time.Second, "the next second", func() bool {
		return time.Now().Truncate(time.Second).After(victim.CreationTimestamp.Time)
	})
	for i := range 9 {
		create(t, wideRoute(evil, fmt.Sprintf("r%d", i), infra, "gw"))
	}
	policy(t, evil, "evil-policy", "HTTPRoute", []string{"r0", "r8"}, "", "base")
	victimKey := "HTTPRoute/" + app + "/web"
	eventually(t, "the shared table served: the older tenant's route and seven of the nine", func() bool {
		tbl := table(infra, "gw")
		if tbl == nil || len(tbl.Rows) != 1+7*2048 {
			return false
		}
		_, rs := routePolicy(tbl, victimKey)
		return rs == app+"/base" && rowsOf(tbl, "HTTPRoute/"+evil+"/r6") == 2048 &&
			rowsOf(tbl, "HTTPRoute/"+evil+"/r7") == 0 && rowsOf(tbl, "HTTPRoute/"+evil+"/r8") == 0
	})
	// The older tenant's update reaches the table (a frozen table never
	// took it).
	// Portal writes the route's status meanwhile: Update retries on conflict.
	web := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: victim.Namespace, Name: victim.Name}}
	devtest.Update(t, env.Client, web, func() { web.Spec.Rules[0].Matches[0].Path.Value = ptr.To("/shop") })
	eventually(t, "the older tenant's update in the table", func() bool {
		for _, r := range table(infra, "gw").Rows {
			if r.Route == victimKey {
				return r.Path.Value == "/shop"
			}
		}
		return false
	})
	eventually(t, "the routes left out say why, naming the bound; their policy is not Programmed", func() bool {
		for _, r := range []string{"r7", "r8"} {
			c := portalCondition(t, evil, r, infra, "gw", wafv1alpha1.ConditionRouteTableAccepted)
			if !hasReason(c, metav1.ConditionFalse, wafv1alpha1.ReasonTableLimitExceeded) || !strings.Contains(c.Message, "past the bound of 16384") {
				return false
			}
		}
		p := ancestorCondition(t, evil, "evil-policy", "r8", wafv1alpha1.ConditionProgrammed)
		return hasReason(p, metav1.ConditionFalse, wafv1alpha1.ReasonTableLimitExceeded) &&
			hasReason(ancestorCondition(t, evil, "evil-policy", "r0", wafv1alpha1.ConditionProgrammed), metav1.ConditionTrue, wafv1alpha1.ReasonProgrammed) &&
			hasReason(ancestorCondition(t, app, "web-policy", "web", wafv1alpha1.ConditionProgrammed), metav1.ConditionTrue, wafv1alpha1.ReasonProgrammed) &&
			portalCondition(t, evil, "r6", infra, "gw", wafv1alpha1.ConditionRouteTableAccepted) == nil
	})

	// Room made: the oldest route left out joins, the newest stays out.
	remove(t, &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: evil, Name: "r1"}})
	eventually(t, "r7 in the table, its condition gone; r8 still out", func() bool {
		tbl := table(infra, "gw")
		return rowsOf(tbl, "HTTPRoute/"+evil+"/r7") == 2048 && rowsOf(tbl, "HTTPRoute/"+evil+"/r8") == 0 &&
			portalCondition(t, evil, "r7", infra, "gw", wafv1alpha1.ConditionRouteTableAccepted) == nil &&
			portalCondition(t, evil, "r8", infra, "gw", wafv1alpha1.ConditionRouteTableAccepted) != nil
	})
}

// A route whose regular expression no data plane runs (Gateway API leaves
// its syntax to implementations) is left out with UnsupportedMatch; the
// waf-proxy, which refuses a table it cannot compile, gets a table without
// it, and the other routes on the Gateway are served.
func TestUnsupportedMatchLeftOut(t *testing.T) {
	start(t)
	infra := namespace(t, "infra")
	app := namespace(t, "app")
	evil := namespace(t, "evil")
	gateway(t, infra, "gw", gatewayv1.NamespacesFromAll)
	httpRoute(t, app, "web", infra, "gw", "web.example.com", "/")
	bad := httpRoute(t, evil, "bad", infra, "gw", "", "/")
	bad.Spec.Rules[0].Matches = append(bad.Spec.Rules[0].Matches, gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{
		Type: ptr.To(gatewayv1.PathMatchRegularExpression), Value: ptr.To("/(.*a){60}q")}})
	if err := env.Client.Update(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the bad route left out, saying why; the other served", func() bool {
		tbl := table(infra, "gw")
		c := portalCondition(t, evil, "bad", infra, "gw", wafv1alpha1.ConditionRouteTableAccepted)
		return tbl != nil && rowsOf(tbl, "HTTPRoute/"+app+"/web") == 1 && rowsOf(tbl, "HTTPRoute/"+evil+"/bad") == 0 &&
			hasReason(c, metav1.ConditionFalse, wafv1alpha1.ReasonUnsupportedMatch) && strings.Contains(c.Message, "at most 256")
	})
}
