package binding

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

// sharedGateway is Gateway infra/gw admitting routes of every namespace.
func sharedGateway() *gatewayv1.Gateway {
	g := gw("infra", "gw")
	g.Spec.Listeners[0].AllowedRoutes = &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: ptr.To(gatewayv1.NamespacesFromAll)}}
	return g
}

// onShared attaches r to infra/gw.
func onShared(r *gatewayv1.HTTPRoute) *gatewayv1.HTTPRoute {
	r.Spec.ParentRefs[0].Namespace = ptr.To(gatewayv1.Namespace("infra"))
	return r
}

// wide is a route at Gateway API's limits: 16 hostnames, 128 matches,
// 2,048 rows.
func wide(ns, name string, age int, match func(i int) gatewayv1.HTTPRouteMatch) *gatewayv1.HTTPRoute {
	var hosts []string
	for h := range 16 {
		hosts = append(hosts, fmt.Sprintf("h%d.%s.example.com", h, ns))
	}
	var ms []gatewayv1.HTTPRouteMatch
	for m := range 128 {
		ms = append(ms, match(m))
	}
	return onShared(hr(ns, name, age, hosts, ms...))
}

func routeRows(tbl *cache.Table, route string) int {
	n := 0
	for _, r := range tbl.Rows {
		if r.Route == route {
			n++
		}
	}
	return n
}

// The audit's case: nine routes of one tenant, each within Gateway API's
// limits, on a shared Gateway. The table holds the older tenant's route
// and as many of the newer routes as fit, oldest first; the two newest
// are left out, saying which bound, and the table is served. The choice
// does not depend on the order the routes are listed in.
func TestFullTableLeavesOutNewestRoutes(t *testing.T) {
	s := &Snapshot{Gateways: []*gatewayv1.Gateway{sharedGateway()},
		HTTPRoutes: []*gatewayv1.HTTPRoute{onShared(hr("victim", "app", 0, []string{"victim.example.com"}, pathMatch(gatewayv1.PathMatchPathPrefix, "/")))}}
	for r := range 9 {
		s.HTTPRoutes = append(s.HTTPRoutes, wide("evil", fmt.Sprintf("r%d", r), 1+r/3, func(m int) gatewayv1.HTTPRouteMatch {
			return pathMatch(gatewayv1.PathMatchExact, fmt.Sprintf("/r%d/m%d", r, m))
		}))
	}
	res := Resolve(s)
	tbl := res.Tables[nn("infra", "gw")]
	if _, err := cache.New(nil, nil).PutTable("infra", "gw", tbl); err != nil {
		t.Fatalf("the table is not served: %v", err)
	}
	if len(tbl.Rows) != 1+7*2048 || routeRows(tbl, "HTTPRoute/victim/app") != 1 {
		t.Fatalf("%d rows, %d of the victim's", len(tbl.Rows), routeRows(tbl, "HTTPRoute/victim/app"))
	}
	for r := range 9 {
		key := fmt.Sprintf("HTTPRoute/evil/r%d", r)
		why, left := res.LeftOut[key][nn("infra", "gw")]
		if left != (r >= 7) || (left && routeRows(tbl, key) != 0) {
			t.Fatalf("%s: left out %v (%+v), %d rows", key, left, why, routeRows(tbl, key))
		}
		if left && (why.Reason != wafv1alpha1.ReasonTableLimitExceeded || !strings.Contains(why.Message, "past the bound of 16384")) {
			t.Fatalf("%s: %+v", key, why)
		}
	}
	rnd := rand.New(rand.NewSource(1))
	for range 5 {
		rnd.Shuffle(len(s.HTTPRoutes), func(i, j int) { s.HTTPRoutes[i], s.HTTPRoutes[j] = s.HTTPRoutes[j], s.HTTPRoutes[i] })
		again := Resolve(s)
		if !reflect.DeepEqual(again.Tables, res.Tables) || !reflect.DeepEqual(again.LeftOut, res.LeftOut) {
			t.Fatal("another listing order gives another table")
		}
	}
}

// Rows of large matches reach the byte bound before the row bound: the
// route that would pass it is left out and the table stays within it.
func TestTableByteBound(t *testing.T) {
	big := func(m int) gatewayv1.HTTPRouteMatch {
		x := pathMatch(gatewayv1.PathMatchExact, fmt.Sprintf("/m%d", m))
		x.Headers = []gatewayv1.HTTPHeaderMatch{{Name: "X-Big", Value: strings.Repeat("v", 1500)}}
		return x
	}
	s := &Snapshot{Gateways: []*gatewayv1.Gateway{sharedGateway()}}
	for r := range 4 {
		s.HTTPRoutes = append(s.HTTPRoutes, wide("evil", fmt.Sprintf("r%d", r), r, big))
	}
	s.HTTPRoutes = append(s.HTTPRoutes, onShared(hr("victim", "app", 9, nil, pathMatch(gatewayv1.PathMatchPathPrefix, "/"))))
	res := Resolve(s)
	tbl := res.Tables[nn("infra", "gw")]
	if n := tbl.EncodedSize(); n > cache.MaxTableBytes || n < cache.MaxTableBytes/2 {
		t.Fatalf("table of %d bytes", n)
	}
	why := res.LeftOut["HTTPRoute/evil/r2"][nn("infra", "gw")]
	if why.Reason != wafv1alpha1.ReasonTableLimitExceeded || !strings.Contains(why.Message, "bytes, past the bound of 8388608") {
		t.Fatalf("r2: %+v", why)
	}
	// A newer, smaller route still fits beside the older ones.
	if routeRows(tbl, "HTTPRoute/victim/app") != 1 || routeRows(tbl, "HTTPRoute/evil/r1") != 2048 {
		t.Fatalf("rows: victim %d, r1 %d", routeRows(tbl, "HTTPRoute/victim/app"), routeRows(tbl, "HTTPRoute/evil/r1"))
	}
}

// Regular expressions: a route with a match no data plane runs is left
// out of every table (UnsupportedMatch); routes whose expressions would
// let a request meet more than cache.MaxHostRegexInsts instructions are
// left out, newest first (TableLimitExceeded); other hosts keep their own
// budget.
func TestTableRegexBounds(t *testing.T) {
	re := func(v string) gatewayv1.HTTPRouteMatch { return pathMatch(gatewayv1.PathMatchRegularExpression, v) }
	costly := `/(.*a){50}q` // cache.MaxRegexInsts instructions
	s := &Snapshot{Gateways: []*gatewayv1.Gateway{sharedGateway()}, HTTPRoutes: []*gatewayv1.HTTPRoute{
		onShared(hr("evil", "any", 0, nil, re(costly), re(costly))),
		onShared(hr("evil", "wild", 1, []string{"*.example.com"}, re(costly))),
		onShared(hr("evil", "own", 2, []string{"evil.example.com"}, re(costly))),
		onShared(hr("evil", "more", 3, []string{"evil.example.com"}, re(costly))),
		onShared(hr("victim", "app", 4, []string{"victim.example.com"}, re(costly))),
		onShared(hr("evil", "broken", 0, nil, re(`((`))),
		onShared(hr("evil", "huge", 0, nil, re(`/(.*a){60}q`))),
	}}
	res := Resolve(s)
	tbl := res.Tables[nn("infra", "gw")]
	for route, want := range map[string]string{"any": "", "wild": "", "own": "", "more": wafv1alpha1.ReasonTableLimitExceeded,
		"app": "", "broken": wafv1alpha1.ReasonUnsupportedMatch, "huge": wafv1alpha1.ReasonUnsupportedMatch} {
		ns := "evil"
		if route == "app" {
			ns = "victim"
		}
		key := "HTTPRoute/" + ns + "/" + route
		why := res.LeftOut[key][nn("infra", "gw")]
		if why.Reason != want || (want == "") != (routeRows(tbl, key) > 0) {
			t.Errorf("%s: %+v, %d rows; want %q", route, why, routeRows(tbl, key), want)
		}
	}
	if why := res.LeftOut["HTTPRoute/evil/more"][nn("infra", "gw")]; !strings.Contains(why.Message, "evil.example.com") ||
		!strings.Contains(why.Message, "at most 1024") {
		t.Errorf("more: %q does not name the host and the bound", why.Message)
	}
	if why := res.LeftOut["HTTPRoute/evil/huge"][nn("infra", "gw")]; !strings.Contains(why.Message, "spec.rules[0].matches[0]") ||
		!strings.Contains(why.Message, "at most 256") {
		t.Errorf("huge: %q does not name the match and the bound", why.Message)
	}
}

// A route left out takes nothing into the table: not its policy, whose
// rule set the table would otherwise let the Gateway's data planes read.
// Its policy says Programmed=False with the reason, on its Route the
// PolicyAffected condition gives way to RouteTableAccepted=False.
func TestLeftOutRouteStatus(t *testing.T) {
	s := &Snapshot{Gateways: []*gatewayv1.Gateway{sharedGateway()},
		Revision:   func(string) (string, bool) { return "rev", true },
		RuleSets:   []*wafv1alpha1.RuleSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "secret"}}},
		HTTPRoutes: []*gatewayv1.HTTPRoute{onShared(hr("evil", "broken", 0, nil, pathMatch(gatewayv1.PathMatchRegularExpression, "((")))},
		Policies: []*wafv1alpha1.WAFGatewayBindingPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "p"},
			Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Name: "secret"},
				TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Name: "broken"}}}}},
	}
	res := Resolve(s)
	if tbl := res.Tables[nn("infra", "gw")]; len(tbl.Policies) != 0 || len(tbl.Rows) != 0 {
		t.Fatalf("the left-out route's policy or rows are in the table: %+v", tbl)
	}
	st := policyStatus(wafv1alpha1.WAFGatewayBindingPolicyStatus{}, res.Policies[nn("evil", "p")], nil)
	if c := meta.FindStatusCondition(st.Ancestors[0].Conditions, wafv1alpha1.ConditionProgrammed); c == nil ||
		c.Reason != wafv1alpha1.ReasonUnsupportedMatch || !strings.Contains(c.Message, "((") {
		t.Fatalf("Programmed: %+v", c)
	}
	parents := desiredParents(nil, res.AffectedRoutes["HTTPRoute/evil/broken"], res.LeftOut["HTTPRoute/evil/broken"], 1)
	if len(parents) != 1 || len(parents[0].Conditions) != 1 ||
		parents[0].Conditions[0].Type != wafv1alpha1.ConditionRouteTableAccepted || parents[0].Conditions[0].Status != metav1.ConditionFalse {
		t.Fatalf("route status: %+v", parents)
	}
}

// A tenant giving each of 40 routes its own inbound anomaly threshold
// would make the shared waf-proxy compile and keep 40 WAFs: the table
// holds at most cache.MaxTablePolicies policies, oldest routes first, and
// the routes whose policy would pass the bound are left out, saying so.
func TestTablePolicyBound(t *testing.T) {
	const n = 40
	s := &Snapshot{
		Revision: func(string) (string, bool) { return "rev", true },
		RuleSets: []*wafv1alpha1.RuleSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "crs"},
			Spec: wafv1alpha1.RuleSetSpec{Overrides: &wafv1alpha1.OverridePermissions{MaxInboundAnomalyThreshold: 100}}}},
		Gateways: []*gatewayv1.Gateway{gw("a", "gw")},
	}
	var targets []gatewayv1.LocalPolicyTargetReference
	for i := range n {
		name := fmt.Sprintf("r%02d", i)
		s.HTTPRoutes = append(s.HTTPRoutes, hr("a", name, i, nil, pathMatch(gatewayv1.PathMatchPathPrefix, "/"+name)))
		ref := gatewayv1.LocalPolicyTargetReference{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Name: gatewayv1.ObjectName(name)}
		targets = append(targets, ref)
		s.Overrides = append(s.Overrides, &wafv1alpha1.RuleSetOverride{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name},
			Spec: wafv1alpha1.RuleSetOverrideSpec{InboundAnomalyThreshold: int32(10 + i),
				TargetRefs: []gatewayv1.LocalPolicyTargetReference{ref}}})
	}
	for i := 0; i < n; i += wafv1alpha1.MaxPolicyTargets {
		s.Policies = append(s.Policies, &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: fmt.Sprintf("p%d", i)},
			Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Name: "crs"},
				TargetRefs: targets[i:min(i+wafv1alpha1.MaxPolicyTargets, n)]}})
	}
	res := Resolve(s)
	tbl := res.Tables[nn("a", "gw")]
	if len(tbl.Policies) != cache.MaxTablePolicies {
		t.Fatalf("%d policies in the table, want %d", len(tbl.Policies), cache.MaxTablePolicies)
	}
	if _, err := cache.New(nil, nil).PutTable("a", "gw", tbl); err != nil {
		t.Fatalf("the table is not served: %v", err)
	}
	for i := range n {
		key := fmt.Sprintf("HTTPRoute/a/r%02d", i)
		why, left := res.LeftOut[key][nn("a", "gw")]
		if left != (i >= cache.MaxTablePolicies) {
			t.Fatalf("%s: left out %v (%+v)", key, left, why)
		}
		if left && (why.Reason != wafv1alpha1.ReasonTableLimitExceeded || !strings.Contains(why.Message, fmt.Sprintf("past the bound of %d", cache.MaxTablePolicies))) {
			t.Fatalf("%s: %+v", key, why)
		}
	}
}
