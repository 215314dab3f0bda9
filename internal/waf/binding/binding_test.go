package binding_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

const (
	baseRules   = "SecRuleEngine On\nSecRule ARGS \"@contains base\" \"id:1,phase:1,deny,status:403\"\n"
	strictRules = "SecRuleEngine On\nSecRule ARGS \"@contains strict\" \"id:2,phase:1,deny,status:403\"\n"
)

// A Gateway-level policy protects every route of the Gateway; a
// Route-level policy replaces it for its route, and its removal gives the
// route back to the Gateway's.
func TestInheritanceAndOverride(t *testing.T) {
	ctx := start(t)
	ns := namespace(t, "inherit")
	ruleSet(t, ns, "base", baseRules, nil)
	ruleSet(t, ns, "strict", strictRules, nil)
	gateway(t, ns, "gw", "")
	httpRoute(t, ns, "shop", ns, "gw", "", "/shop")
	httpRoute(t, ns, "admin", ns, "gw", "", "/admin")
	policy(t, ns, "gw-policy", "Gateway", []string{"gw"}, "", "base")
	eventually(t, "both routes inherit the Gateway's policy", func() bool {
		tb := table(ns, "gw")
		_, a := routePolicy(tb, "HTTPRoute/"+ns+"/shop")
		_, b := routePolicy(tb, "HTTPRoute/"+ns+"/admin")
		return a == ns+"/base" && b == ns+"/base" && tb.Default >= 0
	})
	admin := policy(t, ns, "admin-policy", "HTTPRoute", []string{"admin"}, "", "strict")
	eventually(t, "the admin route runs its own policy, the shop route still the Gateway's", func() bool {
		tb := table(ns, "gw")
		p, a := routePolicy(tb, "HTTPRoute/"+ns+"/admin")
		_, s := routePolicy(tb, "HTTPRoute/"+ns+"/shop")
		return p == ns+"/admin-policy" && a == ns+"/strict" && s == ns+"/base"
	})
	eventually(t, "both policies Accepted, ResolvedRefs and Programmed", func() bool {
		for _, c := range []struct{ name, ancestor string }{{"gw-policy", "gw"}, {"admin-policy", "admin"}} {
			if !hasReason(ancestorCondition(t, ns, c.name, c.ancestor, "Accepted"), metav1.ConditionTrue, "Accepted") ||
				!hasReason(ancestorCondition(t, ns, c.name, c.ancestor, "ResolvedRefs"), metav1.ConditionTrue, "ResolvedRefs") ||
				!hasReason(ancestorCondition(t, ns, c.name, c.ancestor, "Programmed"), metav1.ConditionTrue, "Programmed") {
				return false
			}
		}
		return true
	})
	remove(t, admin)
	eventually(t, "the admin route inherits the Gateway's policy again", func() bool {
		_, a := routePolicy(table(ns, "gw"), "HTTPRoute/"+ns+"/admin")
		return a == ns+"/base"
	})
	// A route-level policy on a route attached to no Gateway is accepted
	// but has nothing to program.
	httpRoute(t, ns, "orphan", ns, "missing-gw", "", "/")
	policy(t, ns, "orphan-policy", "HTTPRoute", []string{"orphan"}, "", "strict")
	eventually(t, "the orphan route's policy Programmed=False", func() bool {
		return hasReason(ancestorCondition(t, ns, "orphan-policy", "orphan", "Programmed"), metav1.ConditionFalse, "Pending") &&
			hasReason(ancestorCondition(t, ns, "orphan-policy", "orphan", "Accepted"), metav1.ConditionTrue, "Accepted")
	})
	_ = ctx
}

// Two policies on one Gateway: the oldest wins whatever the names; the
// other is Conflicted, and takes over when the oldest goes.
func TestConflictOldestWins(t *testing.T) {
	ctx := start(t)
	ns := namespace(t, "conflict")
	ruleSet(t, ns, "base", baseRules, nil)
	ruleSet(t, ns, "strict", strictRules, nil)
	gateway(t, ns, "gw", "")
	httpRoute(t, ns, "web", ns, "gw", "", "/")
	// Named to sort last, so only its age can make it win.
	older := policy(t, ns, "z-older", "Gateway", []string{"gw"}, "", "base")
	// Creation timestamps have a one-second resolution: the newer policy
	// is created in a later second.
	waitFor(t, 5*time.Second, "the next second", func() bool {
		return time.Now().Truncate(time.Second).After(older.CreationTimestamp.Time)
	})
	policy(t, ns, "a-newer", "Gateway", []string{"gw"}, "", "strict")
	eventually(t, "the newer policy Conflicted and the table running the older", func() bool {
		c := ancestorCondition(t, ns, "a-newer", "gw", "Accepted")
		p, _ := routePolicy(table(ns, "gw"), "HTTPRoute/"+ns+"/web")
		return hasReason(c, metav1.ConditionFalse, "Conflicted") && p == ns+"/z-older" &&
			hasReason(ancestorCondition(t, ns, "z-older", "gw", "Accepted"), metav1.ConditionTrue, "Accepted")
	})
	remove(t, older)
	eventually(t, "the remaining policy accepted and in the table", func() bool {
		p, _ := routePolicy(table(ns, "gw"), "HTTPRoute/"+ns+"/web")
		return p == ns+"/a-newer" && hasReason(ancestorCondition(t, ns, "a-newer", "gw", "Accepted"), metav1.ConditionTrue, "Accepted")
	})
	// A target that does not exist.
	policy(t, ns, "lost", "Gateway", []string{"nowhere"}, "", "base")
	eventually(t, "TargetNotFound", func() bool {
		return hasReason(ancestorCondition(t, ns, "lost", "nowhere", "Accepted"), metav1.ConditionFalse, "TargetNotFound")
	})
	_ = ctx
}

// A RuleSet of another namespace is used only while a ReferenceGrant
// there allows it; removing the grant revokes the reference: the route
// fails closed and the data plane can no longer read the rule set.
func TestReferenceGrantGrantAndRevoke(t *testing.T) {
	ctx := start(t)
	sec := namespace(t, "security")
	app := namespace(t, "app")
	ruleSet(t, sec, "shared", baseRules, nil)
	gateway(t, app, "gw", "")
	httpRoute(t, app, "web", app, "gw", "", "/")
	policy(t, app, "p", "Gateway", []string{"gw"}, sec, "shared")
	eventually(t, "RefNotPermitted without a grant, and the table failing closed", func() bool {
		tb := table(app, "gw")
		return hasReason(ancestorCondition(t, app, "p", "gw", "ResolvedRefs"), metav1.ConditionFalse, "RefNotPermitted") &&
			tb != nil && tb.Default >= 0 && tb.Policies[tb.Default].RuleSet == nil && tb.Policies[tb.Default].Unavailable != ""
	})
	token, err := env.Token(ctx, app, "waf-proxy", cache.Audience)
	if err != nil {
		t.Fatal(err)
	}
	proxyClient, err := env.NewClient(token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proxyClient.Entry(ctx, sec, "shared"); err == nil {
		t.Fatal("the app's data plane read the security rule set without a grant")
	}
	grant := &gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: sec, Name: "allow-app"},
		Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: "waf.portal.io", Kind: "WAFGatewayBindingPolicy", Namespace: gatewayv1.Namespace(app)}},
			To:   []gatewayv1.ReferenceGrantTo{{Group: "waf.portal.io", Kind: "RuleSet", Name: ptr.To(gatewayv1.ObjectName("shared"))}},
		}}
	create(t, grant)
	eventually(t, "the reference resolved and in the table", func() bool {
		_, rs := routePolicy(table(app, "gw"), "HTTPRoute/"+app+"/web")
		return rs == sec+"/shared" && hasReason(ancestorCondition(t, app, "p", "gw", "ResolvedRefs"), metav1.ConditionTrue, "ResolvedRefs")
	})
	if _, err := proxyClient.Entry(ctx, sec, "shared"); err != nil {
		t.Fatalf("the app's data plane cannot read the rule set its table runs: %v", err)
	}
	remove(t, grant)
	eventually(t, "the reference revoked", func() bool {
		_, rs := routePolicy(table(app, "gw"), "HTTPRoute/"+app+"/web")
		return rs == "" && hasReason(ancestorCondition(t, app, "p", "gw", "ResolvedRefs"), metav1.ConditionFalse, "RefNotPermitted")
	})
	if _, err := proxyClient.Entry(ctx, sec, "shared"); err == nil {
		t.Fatal("the app's data plane still reads the security rule set after the grant was removed")
	}
}

// A grant for another kind, another namespace or another name does not
// let a policy reference a RuleSet.
func TestReferenceGrantMustMatch(t *testing.T) {
	start(t)
	sec := namespace(t, "security")
	app := namespace(t, "app")
	other := namespace(t, "other")
	ruleSet(t, sec, "shared", baseRules, nil)
	gateway(t, app, "gw", "")
	create(t,
		&gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: sec, Name: "other-ns"}, Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: "waf.portal.io", Kind: "WAFGatewayBindingPolicy", Namespace: gatewayv1.Namespace(other)}},
			To:   []gatewayv1.ReferenceGrantTo{{Group: "waf.portal.io", Kind: "RuleSet"}}}},
		&gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: sec, Name: "other-name"}, Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: "waf.portal.io", Kind: "WAFGatewayBindingPolicy", Namespace: gatewayv1.Namespace(app)}},
			To:   []gatewayv1.ReferenceGrantTo{{Group: "waf.portal.io", Kind: "RuleSet", Name: ptr.To(gatewayv1.ObjectName("not-shared"))}}}},
		&gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "wrong-side"}, Spec: gatewayv1.ReferenceGrantSpec{
			From: []gatewayv1.ReferenceGrantFrom{{Group: "waf.portal.io", Kind: "WAFGatewayBindingPolicy", Namespace: gatewayv1.Namespace(app)}},
			To:   []gatewayv1.ReferenceGrantTo{{Group: "waf.portal.io", Kind: "RuleSet"}}}},
	)
	policy(t, app, "p", "Gateway", []string{"gw"}, sec, "shared")
	refused := func() bool {
		return hasReason(ancestorCondition(t, app, "p", "gw", "ResolvedRefs"), metav1.ConditionFalse, "RefNotPermitted")
	}
	eventually(t, "RefNotPermitted", refused)
	// RefNotPermitted is also where a policy starts: show the controller
	// weighs the grants by adding the one that matches, then taking it
	// away so only the three that do not are left.
	right := &gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: sec, Name: "right"}, Spec: gatewayv1.ReferenceGrantSpec{
		From: []gatewayv1.ReferenceGrantFrom{{Group: "waf.portal.io", Kind: "WAFGatewayBindingPolicy", Namespace: gatewayv1.Namespace(app)}},
		To:   []gatewayv1.ReferenceGrantTo{{Group: "waf.portal.io", Kind: "RuleSet", Name: ptr.To(gatewayv1.ObjectName("shared"))}}}}
	create(t, right)
	eventually(t, "ResolvedRefs with the matching grant", func() bool {
		return hasReason(ancestorCondition(t, app, "p", "gw", "ResolvedRefs"), metav1.ConditionTrue, "ResolvedRefs")
	})
	remove(t, right)
	eventually(t, "RefNotPermitted again with only the grants that do not match", refused)
}

// A route of namespace B that names a Gateway of namespace A as its parent
// does not attach to it when the Gateway admits only its own namespace: it
// gets neither A's protection nor a place in A's table.
func TestForeignRouteDoesNotAttach(t *testing.T) {
	start(t)
	a := namespace(t, "tenant-a")
	b := namespace(t, "tenant-b")
	ruleSet(t, a, "base", baseRules, nil)
	gateway(t, a, "gw", gatewayv1.NamespacesFromSame)
	httpRoute(t, a, "own", a, "gw", "", "/own")
	httpRoute(t, b, "intruder", a, "gw", "", "/")
	policy(t, a, "p", "Gateway", []string{"gw"}, "", "base")
	eventually(t, "A's own route in A's table", func() bool {
		_, rs := routePolicy(table(a, "gw"), "HTTPRoute/"+a+"/own")
		return rs == a+"/base"
	})
	for _, r := range table(a, "gw").Rows {
		if r.Route == "HTTPRoute/"+b+"/intruder" {
			t.Fatalf("B's route is in A's table: %+v", r)
		}
	}
	var route gatewayv1.HTTPRoute
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: b, Name: "intruder"}, &route); err != nil {
		t.Fatal(err)
	}
	for _, p := range route.Status.Parents {
		if p.ControllerName == wafv1alpha1.BindingControllerName {
			t.Fatalf("B's route is marked affected by A's policy: %+v", p)
		}
	}
	// A policy of B naming A's Gateway targets a Gateway of B, which does
	// not exist: it cannot reach A's.
	ruleSet(t, b, "lax", strictRules, nil)
	policy(t, b, "hijack", "Gateway", []string{"gw"}, "", "lax")
	eventually(t, "B's policy TargetNotFound", func() bool {
		return hasReason(ancestorCondition(t, b, "hijack", "gw", "Accepted"), metav1.ConditionFalse, "TargetNotFound")
	})
	if p, _ := routePolicy(table(a, "gw"), "HTTPRoute/"+a+"/own"); p != a+"/p" {
		t.Fatalf("A's route runs %q", p)
	}
	// A Gateway that admits every namespace takes it.
	gateway(t, a, "shared-gw", gatewayv1.NamespacesFromAll)
	httpRoute(t, b, "tenant", a, "shared-gw", "", "/")
	policy(t, a, "shared-p", "Gateway", []string{"shared-gw"}, "", "base")
	eventually(t, "B's route in the shared Gateway's table", func() bool {
		_, rs := routePolicy(table(a, "shared-gw"), "HTTPRoute/"+b+"/tenant")
		return rs == a+"/base"
	})
}

// Listeners decide which routes attach: a route whose parentRef names a
// listener that does not admit its namespace, or whose hostnames do not
// intersect the listener's, is not in the Gateway's table, so neither the
// Gateway's policy nor its own runs for it there; labelling the namespace
// the listener selects attaches it.
func TestAllowedRoutesRefuseRoute(t *testing.T) {
	ctx := start(t)
	a := namespace(t, "listeners-a")
	b := namespace(t, "listeners-b")
	ruleSet(t, a, "base", baseRules, nil)
	ruleSet(t, a, "strict", strictRules, nil)
	sel := gatewayv1.NamespacesFromSelector
	create(t, &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: a, Name: "gw"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: "example", Listeners: []gatewayv1.Listener{
			{Name: "web", Port: 80, Protocol: gatewayv1.HTTPProtocolType, Hostname: ptr.To(gatewayv1.Hostname("*.example.com"))},
			{Name: "partners", Port: 8080, Protocol: gatewayv1.HTTPProtocolType, AllowedRoutes: &gatewayv1.AllowedRoutes{
				Namespaces: &gatewayv1.RouteNamespaces{From: &sel, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"partner": "true"}}}}},
		}}})
	httpRoute(t, a, "shop", a, "gw", "shop.example.com", "/shop")
	// Listener web takes only *.example.com; partners only labelled
	// namespaces, and a is not labelled.
	httpRoute(t, a, "elsewhere", a, "gw", "www.example.org", "/elsewhere")
	sneaky := httpRoute(t, a, "sneaky", a, "gw", "", "/sneaky")
	sneaky.Spec.ParentRefs[0].SectionName = ptr.To(gatewayv1.SectionName("partners"))
	if err := env.Client.Update(ctx, sneaky); err != nil {
		t.Fatal(err)
	}
	httpRoute(t, b, "partner", a, "gw", "", "/partner")
	policy(t, a, "p", "Gateway", []string{"gw"}, "", "base")
	policy(t, a, "elsewhere-p", "HTTPRoute", []string{"elsewhere"}, "", "strict")
	eventually(t, "the admitted route in the table, the refused ones not, and the refused route's policy not Programmed", func() bool {
		tb := table(a, "gw")
		if _, rs := routePolicy(tb, "HTTPRoute/"+a+"/shop"); rs != a+"/base" {
			return false
		}
		return !hasReason(ancestorCondition(t, a, "elsewhere-p", "elsewhere", "Programmed"), metav1.ConditionTrue, "Programmed") &&
			hasReason(ancestorCondition(t, a, "elsewhere-p", "elsewhere", "Programmed"), metav1.ConditionFalse, "Pending")
	})
	tb := table(a, "gw")
	for _, r := range tb.Rows {
		switch r.Route {
		case "HTTPRoute/" + a + "/elsewhere", "HTTPRoute/" + a + "/sneaky", "HTTPRoute/" + b + "/partner":
			t.Errorf("refused route %s is in the table: %+v", r.Route, r)
		case "HTTPRoute/" + a + "/shop":
			if len(r.Hostnames) != 1 || r.Hostnames[0] != "shop.example.com" {
				t.Errorf("shop's hostnames %v", r.Hostnames)
			}
		}
	}
	for _, p := range tb.Policies {
		if p.Policy == a+"/elsewhere-p" {
			t.Errorf("the refused route's policy is in the table: %+v", p)
		}
	}
	var nsObj corev1.Namespace
	if err := env.Client.Get(ctx, client.ObjectKey{Name: b}, &nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["partner"] = "true"
	if err := env.Client.Update(ctx, &nsObj); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the partner route attached once its namespace is selected", func() bool {
		_, rs := routePolicy(table(a, "gw"), "HTTPRoute/"+b+"/partner")
		return rs == a+"/base"
	})
	if _, rs := routePolicy(table(a, "gw"), "HTTPRoute/"+a+"/sneaky"); rs != "" {
		t.Errorf("the sneaky route attached through a listener that does not select its namespace: %s", rs)
	}
}

// The PolicyAffected condition goes on the Gateway by server-side apply
// beside the Gateway controller's own conditions, and on each Route in a
// status.parents entry of Portal's, beside the Gateway controller's entry;
// both go when the policy goes.
func TestAffectedConditions(t *testing.T) {
	ctx := start(t)
	ns := namespace(t, "affected")
	ruleSet(t, ns, "base", baseRules, nil)
	gw := gateway(t, ns, "gw", "")
	route := httpRoute(t, ns, "web", ns, "gw", "", "/")
	// The Gateway controller's status, written first.
	meta.SetStatusCondition(&gw.Status.Conditions, metav1.Condition{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "by the gateway controller"})
	if err := env.Client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	theirs := gatewayv1.RouteParentStatus{
		ParentRef:      gatewayv1.ParentReference{Name: "gw"},
		ControllerName: "example.com/gateway-controller",
		Conditions:     []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "by the gateway controller", LastTransitionTime: metav1.Now()}},
	}
	route.Status.Parents = []gatewayv1.RouteParentStatus{theirs}
	if err := env.Client.Status().Update(ctx, route); err != nil {
		t.Fatal(err)
	}
	p := policy(t, ns, "p", "Gateway", []string{"gw"}, "", "base")
	eventually(t, "PolicyAffected on the Gateway and the Route, beside the Gateway controller's status", func() bool {
		var g gatewayv1.Gateway
		var r gatewayv1.HTTPRoute
		if env.Client.Get(ctx, client.ObjectKeyFromObject(gw), &g) != nil || env.Client.Get(ctx, client.ObjectKeyFromObject(route), &r) != nil {
			return false
		}
		c := meta.FindStatusCondition(g.Status.Conditions, wafv1alpha1.ConditionPolicyAffected)
		accepted := meta.FindStatusCondition(g.Status.Conditions, "Accepted")
		return hasReason(c, metav1.ConditionTrue, "PolicyAffected") && accepted != nil && accepted.Message == "by the gateway controller" &&
			routeAffected(r) && routeHas(r, "example.com/gateway-controller")
	})
	remove(t, p)
	eventually(t, "PolicyAffected removed, the Gateway controller's status kept", func() bool {
		var g gatewayv1.Gateway
		var r gatewayv1.HTTPRoute
		if env.Client.Get(ctx, client.ObjectKeyFromObject(gw), &g) != nil || env.Client.Get(ctx, client.ObjectKeyFromObject(route), &r) != nil {
			return false
		}
		return meta.FindStatusCondition(g.Status.Conditions, wafv1alpha1.ConditionPolicyAffected) == nil &&
			meta.FindStatusCondition(g.Status.Conditions, "Accepted") != nil &&
			!routeAffected(r) && routeHas(r, "example.com/gateway-controller")
	})
}

func routeAffected(r gatewayv1.HTTPRoute) bool {
	for _, p := range r.Status.Parents {
		if p.ControllerName == wafv1alpha1.BindingControllerName &&
			hasReason(meta.FindStatusCondition(p.Conditions, wafv1alpha1.ConditionPolicyAffected), metav1.ConditionTrue, "PolicyAffected") {
			return true
		}
	}
	return false
}

func routeHas(r gatewayv1.HTTPRoute, controller string) bool {
	for _, p := range r.Status.Parents {
		if string(p.ControllerName) == controller {
			return true
		}
	}
	return false
}

// The cache serves a Gateway's table to a ServiceAccount token of the
// Gateway's namespace and refuses another namespace's.
func TestTableTokens(t *testing.T) {
	ctx := start(t)
	a := namespace(t, "tokens-a")
	b := namespace(t, "tokens-b")
	ruleSet(t, a, "base", baseRules, nil)
	gateway(t, a, "gw", "")
	httpRoute(t, a, "web", a, "gw", "", "/")
	policy(t, a, "p", "Gateway", []string{"gw"}, "", "base")
	eventually(t, "the table", func() bool { return table(a, "gw") != nil })
	clientFor := func(ns string) *cache.Client {
		token, err := env.Token(ctx, ns, "waf-proxy", cache.Audience)
		if err != nil {
			t.Fatal(err)
		}
		c, err := env.NewClient(token)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var tbl *cache.Table
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := clientFor(a).TableLatest(ctx, a, "gw")
		if err != nil {
			return false, nil
		}
		tbl, err = clientFor(a).TableWithDigest(ctx, a, "gw", l.SHA256)
		return err == nil, nil
	})
	if err != nil || tbl.Gateway != a+"/gw" {
		t.Fatalf("the Gateway's namespace cannot read its table: %v", err)
	}
	_, err = clientFor(b).TableLatest(ctx, a, "gw")
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("another namespace's token read the table: %v", err)
	}
}

// A GRPCRoute inherits the Gateway's policy, and a GRPCRoute-level policy
// replaces it; its method matches are in the table as the paths gRPC
// sends.
func TestGRPCRoute(t *testing.T) {
	start(t)
	ns := namespace(t, "grpc")
	ruleSet(t, ns, "base", baseRules, nil)
	ruleSet(t, ns, "strict", strictRules, nil)
	gateway(t, ns, "gw", "")
	svc, method := "shop.Cart", "Add"
	create(t, &gatewayv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cart"},
		Spec: gatewayv1.GRPCRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules:           []gatewayv1.GRPCRouteRule{{Matches: []gatewayv1.GRPCRouteMatch{{Method: &gatewayv1.GRPCMethodMatch{Service: &svc, Method: &method}}}}},
		}})
	policy(t, ns, "gw-policy", "Gateway", []string{"gw"}, "", "base")
	eventually(t, "the GRPCRoute inherits the Gateway's policy, matched on its wire path", func() bool {
		tb := table(ns, "gw")
		_, rs := routePolicy(tb, "GRPCRoute/"+ns+"/cart")
		return rs == ns+"/base" && tb.Rows[0].Path != nil && tb.Rows[0].Path.Value == "/shop.Cart/Add" && tb.Rows[0].Path.Type == "Exact"
	})
	policy(t, ns, "cart-policy", "GRPCRoute", []string{"cart"}, "", "strict")
	eventually(t, "the GRPCRoute runs its own policy", func() bool {
		_, rs := routePolicy(table(ns, "gw"), "GRPCRoute/"+ns+"/cart")
		return rs == ns+"/strict" &&
			hasReason(ancestorCondition(t, ns, "cart-policy", "cart", "Programmed"), metav1.ConditionTrue, "Programmed")
	})
}

// The API server refuses what the CRD's validation rules forbid, with a
// message that says what to fix.
func TestPolicyValidation(t *testing.T) {
	ctx := start(t)
	ns := namespace(t, "validation")
	target := func(kind, name string) gatewayv1.LocalPolicyTargetReference {
		return gatewayv1.LocalPolicyTargetReference{Group: gatewayv1.GroupName, Kind: gatewayv1.Kind(kind), Name: gatewayv1.ObjectName(name)}
	}
	rs := &wafv1alpha1.RuleSetReference{Name: "crs"}
	for _, c := range []struct {
		spec wafv1alpha1.WAFGatewayBindingPolicySpec
		want string
	}{
		{wafv1alpha1.WAFGatewayBindingPolicySpec{TargetRefs: []gatewayv1.LocalPolicyTargetReference{target("Gateway", "a"), target("HTTPRoute", "b")}, RuleSet: rs}, "one kind"},
		{wafv1alpha1.WAFGatewayBindingPolicySpec{TargetRefs: []gatewayv1.LocalPolicyTargetReference{target("Service", "a")}, RuleSet: rs}, "Gateways, HTTPRoutes or GRPCRoutes"},
		{wafv1alpha1.WAFGatewayBindingPolicySpec{TargetRefs: []gatewayv1.LocalPolicyTargetReference{target("Gateway", "a"), target("Gateway", "a")}, RuleSet: rs}, "same object twice"},
		{wafv1alpha1.WAFGatewayBindingPolicySpec{TargetRefs: []gatewayv1.LocalPolicyTargetReference{target("Gateway", "a")}}, "exactly one of ruleSet and bundle"},
		{wafv1alpha1.WAFGatewayBindingPolicySpec{TargetRefs: []gatewayv1.LocalPolicyTargetReference{target("Gateway", "a")}, RuleSet: rs,
			Bundle: &wafv1alpha1.BundleReference{Location: "s3://bucket/key", SHA256: strings.Repeat("a", 64)}}, "exactly one of ruleSet and bundle"},
		{wafv1alpha1.WAFGatewayBindingPolicySpec{TargetRefs: []gatewayv1.LocalPolicyTargetReference{target("Gateway", "a")}, RuleSet: rs,
			SecurityLogs: []wafv1alpha1.SecurityLog{{Name: "f", Destination: wafv1alpha1.SecurityLogDestination{Type: "File", File: &wafv1alpha1.SecurityLogFile{Path: "a/../../etc/passwd"}}}}}, "path may not contain"},
		{wafv1alpha1.WAFGatewayBindingPolicySpec{TargetRefs: []gatewayv1.LocalPolicyTargetReference{target("Gateway", "a")}, RuleSet: rs,
			SecurityLogs: []wafv1alpha1.SecurityLog{{Name: "f", Destination: wafv1alpha1.SecurityLogDestination{Type: "File"}}}}, "file is required"},
	} {
		p := &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "bad-"}, Spec: c.spec}
		err := env.Client.Create(ctx, p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.spec, err, c.want)
		}
	}
}
