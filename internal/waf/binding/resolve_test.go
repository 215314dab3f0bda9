package binding

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func gw(ns, name string) *gatewayv1.Gateway {
	return &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.GatewaySpec{Listeners: []gatewayv1.Listener{{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}}}}
}

func hr(ns, name string, age int, hosts []string, matches ...gatewayv1.HTTPRouteMatch) *gatewayv1.HTTPRoute {
	r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Rules:           []gatewayv1.HTTPRouteRule{{Matches: matches}},
		}}
	for _, h := range hosts {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gatewayv1.Hostname(h))
	}
	return r
}

func pathMatch(typ gatewayv1.PathMatchType, v string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: &typ, Value: &v}}
}

// Rows follow Gateway API's precedence: hostname (exact, then wildcard,
// longer first), Exact path, longest prefix, method, header count, then
// the oldest route.
func TestTablePrecedence(t *testing.T) {
	withMethod := pathMatch(gatewayv1.PathMatchPathPrefix, "/api")
	withMethod.Method = ptr.To(gatewayv1.HTTPMethodPost)
	withHeader := pathMatch(gatewayv1.PathMatchPathPrefix, "/api")
	withHeader.Headers = []gatewayv1.HTTPHeaderMatch{{Name: "X-Env", Value: "canary"}}
	s := &Snapshot{
		Gateways: []*gatewayv1.Gateway{gw("a", "gw")},
		HTTPRoutes: []*gatewayv1.HTTPRoute{
			hr("a", "catchall", 0, nil),
			hr("a", "api-newer", 5, nil, pathMatch(gatewayv1.PathMatchPathPrefix, "/api")),
			hr("a", "api-older", 1, nil, pathMatch(gatewayv1.PathMatchPathPrefix, "/api")),
			hr("a", "api-long", 9, nil, pathMatch(gatewayv1.PathMatchPathPrefix, "/api/v2")),
			hr("a", "api-exact", 9, nil, pathMatch(gatewayv1.PathMatchExact, "/api")),
			hr("a", "api-method", 9, nil, withMethod),
			hr("a", "api-header", 9, nil, withHeader),
			hr("a", "wild", 9, []string{"*.example.com"}),
			hr("a", "host", 9, []string{"www.example.com"}),
		},
	}
	tbl := Resolve(s).Tables[nn("a", "gw")]
	var got []string
	for _, r := range tbl.Rows {
		got = append(got, r.Route[len("HTTPRoute/a/"):])
	}
	want := []string{"host", "wild", "api-exact", "api-long", "api-method", "api-header", "api-older", "api-newer", "catchall"}
	if !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
}

// gRPC method matches become the request paths they are on the wire.
func TestGRPCPaths(t *testing.T) {
	svc, method := "shop.Cart", "Add"
	for _, c := range []struct {
		m    *gatewayv1.GRPCMethodMatch
		want cache.StringMatch
	}{
		{nil, cache.StringMatch{Type: MatchPathPrefix, Value: "/"}},
		{&gatewayv1.GRPCMethodMatch{Service: &svc, Method: &method}, cache.StringMatch{Type: MatchExact, Value: "/shop.Cart/Add"}},
		{&gatewayv1.GRPCMethodMatch{Service: &svc}, cache.StringMatch{Type: MatchPathPrefix, Value: "/shop.Cart"}},
		{&gatewayv1.GRPCMethodMatch{Method: &method}, cache.StringMatch{Type: MatchRegex, Value: "/[^/]+/Add"}},
	} {
		if got := grpcPath(c.m); *got != c.want {
			t.Errorf("%+v: %+v, want %+v", c.m, *got, c.want)
		}
	}
}

// An override applies only when the RuleSet permits every part of it.
func TestOverridePermissions(t *testing.T) {
	perms := &wafv1alpha1.OverridePermissions{
		RuleIDs: []wafv1alpha1.RuleIDRange{{From: 942100, To: 942199}}, Tags: []string{"attack-xss"}, MaxInboundAnomalyThreshold: 20,
	}
	for _, c := range []struct {
		spec wafv1alpha1.RuleSetOverrideSpec
		ok   bool
	}{
		{wafv1alpha1.RuleSetOverrideSpec{DisableRuleIDs: []int64{942100, 942199}, DisableTags: []string{"attack-xss"}, InboundAnomalyThreshold: 20}, true},
		{wafv1alpha1.RuleSetOverrideSpec{DisableRuleIDs: []int64{942200}}, false},
		{wafv1alpha1.RuleSetOverrideSpec{DisableTags: []string{"attack-sqli"}}, false},
		{wafv1alpha1.RuleSetOverrideSpec{InboundAnomalyThreshold: 21}, false},
	} {
		if got := notPermitted(c.spec, perms) == ""; got != c.ok {
			t.Errorf("%+v: permitted %v, want %v", c.spec, got, c.ok)
		}
	}
	if notPermitted(wafv1alpha1.RuleSetOverrideSpec{DisableTags: []string{"x"}}, nil) == "" {
		t.Error("a RuleSet without spec.overrides permitted an override")
	}
}

// A policy of namespace A whose RuleSet is in B needs a ReferenceGrant in
// B from A's policies to that RuleSet.
func TestGranted(t *testing.T) {
	g := &gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "sec"}, Spec: gatewayv1.ReferenceGrantSpec{
		From: []gatewayv1.ReferenceGrantFrom{{Group: "waf.portal.io", Kind: "WAFGatewayBindingPolicy", Namespace: "app"}},
		To:   []gatewayv1.ReferenceGrantTo{{Group: "waf.portal.io", Kind: "RuleSet", Name: ptr.To(gatewayv1.ObjectName("crs"))}},
	}}
	grants := []*gatewayv1.ReferenceGrant{g}
	if !granted(grants, "app", "sec", "crs") {
		t.Fatal("the grant does not allow what it says")
	}
	for _, c := range [][3]string{{"other", "sec", "crs"}, {"app", "sec", "other"}, {"app", "elsewhere", "crs"}} {
		if granted(grants, c[0], c[1], c[2]) {
			t.Errorf("granted %v", c)
		}
	}
}

// fakeBundles answers spec.bundle from a map: a pure unit test of how
// Resolve maps what bundle storage says to tables and conditions.
type fakeBundles map[string]struct {
	ok             bool
	reason, detail string
}

func (f fakeBundles) Bundle(p types.NamespacedName, location, _ string) (cache.TableRuleSet, bool, string, string) {
	o := f[location]
	if !o.ok {
		return cache.TableRuleSet{}, false, o.reason, o.detail
	}
	return cache.TableRuleSet{Namespace: p.Namespace, Name: "bundle-x", UUID: "u"}, true, o.reason, o.detail
}

func (fakeBundles) Retain(map[types.NamespacedName]wafv1alpha1.BundleReference) {}

// spec.bundle: fresh is Programmed; stale stays enforced with
// Programmed=False/StaleBundle; a cold miss fails closed; without storage
// the policy says bundle storage is not configured.
func TestBundleOutcomes(t *testing.T) {
	pol := func(name, loc string) *wafv1alpha1.WAFGatewayBindingPolicy {
		return &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name},
			Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{Bundle: &wafv1alpha1.BundleReference{Location: loc, SHA256: "00"},
				TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: "Gateway", Name: gatewayv1.ObjectName(name)}}}}
	}
	s := &Snapshot{
		Gateways: []*gatewayv1.Gateway{gw("a", "fresh"), gw("a", "stale"), gw("a", "missing")},
		Policies: []*wafv1alpha1.WAFGatewayBindingPolicy{pol("fresh", "s3://b/fresh"), pol("stale", "s3://b/stale"), pol("missing", "s3://b/missing")},
		Bundles: fakeBundles{
			"s3://b/fresh":   {ok: true},
			"s3://b/stale":   {ok: true, reason: "StaleBundle", detail: "the last good bundle stays"},
			"s3://b/missing": {reason: "IntegrityError", detail: "checksum mismatch"},
		},
	}
	res := Resolve(s)
	for name, want := range map[string]struct {
		enforced bool
		status   metav1.ConditionStatus
		reason   string
	}{
		"fresh": {true, metav1.ConditionTrue, "Programmed"}, "stale": {true, metav1.ConditionFalse, "StaleBundle"},
		"missing": {false, metav1.ConditionFalse, "IntegrityError"},
	} {
		tbl := res.Tables[nn("a", name)]
		if got := tbl.Policies[tbl.Default].RuleSet != nil; got != want.enforced {
			t.Errorf("%s: enforced %v, want %v", name, got, want.enforced)
		}
		st := policyStatus(wafv1alpha1.WAFGatewayBindingPolicyStatus{}, res.Policies[nn("a", name)], nil)
		c := meta.FindStatusCondition(st.Ancestors[0].Conditions, "Programmed")
		if c == nil || c.Status != want.status || c.Reason != want.reason {
			t.Errorf("%s: Programmed %+v, want %s %s", name, c, want.status, want.reason)
		}
	}
	s.Bundles = nil
	res = Resolve(s)
	st := policyStatus(wafv1alpha1.WAFGatewayBindingPolicyStatus{}, res.Policies[nn("a", "fresh")], nil)
	if c := meta.FindStatusCondition(st.Ancestors[0].Conditions, "Programmed"); c == nil || c.Reason != "FetchError" ||
		!strings.Contains(c.Message, "bundle storage not configured") {
		t.Errorf("without storage: %+v", c)
	}
	if tbl := res.Tables[nn("a", "fresh")]; tbl.Policies[tbl.Default].RuleSet != nil || tbl.Policies[tbl.Default].Unavailable == "" {
		t.Errorf("without storage the routes do not fail closed: %+v", tbl.Policies)
	}
}

// Two overrides on one route: the oldest applies, the other is
// Conflicted; an override on a route without a policy says NoRuleSet.
func TestOverrideConflictAndNoRuleSet(t *testing.T) {
	ov := func(name string, age int, route string) *wafv1alpha1.RuleSetOverride {
		return &wafv1alpha1.RuleSetOverride{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
			Spec: wafv1alpha1.RuleSetOverrideSpec{DisableTags: []string{"attack-xss"},
				TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Name: gatewayv1.ObjectName(route)}}}}
	}
	s := &Snapshot{
		Revision: func(string) (string, bool) { return "rev", true },
		RuleSets: []*wafv1alpha1.RuleSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "crs"},
			Spec: wafv1alpha1.RuleSetSpec{Overrides: &wafv1alpha1.OverridePermissions{Tags: []string{"attack-xss"}}}}},
		Gateways:   []*gatewayv1.Gateway{gw("a", "gw")},
		HTTPRoutes: []*gatewayv1.HTTPRoute{hr("a", "web", 0, nil), hr("a", "lonely", 0, nil)},
		Policies: []*wafv1alpha1.WAFGatewayBindingPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"},
			Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Name: "crs"},
				TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Name: "web"}}}}},
		Overrides: []*wafv1alpha1.RuleSetOverride{ov("z-old", 0, "web"), ov("a-new", 5, "web"), ov("alone", 0, "lonely")},
	}
	res := Resolve(s)
	for name, reason := range map[string]string{"z-old": "Accepted", "a-new": "Conflicted", "alone": "NoRuleSet"} {
		if c := meta.FindStatusCondition(res.Overrides[nn("a", name)].Conditions, "Accepted"); c == nil || c.Reason != reason {
			t.Errorf("%s: %+v, want %s", name, c, reason)
		}
	}
	tbl := res.Tables[nn("a", "gw")]
	for _, r := range tbl.Rows {
		if r.Route == "HTTPRoute/a/web" && (r.Policy < 0 || tbl.Policies[r.Policy].Exclusions == nil) {
			t.Errorf("the winning override is not in the table: %+v", tbl.Policies)
		}
	}
}

// A route's hostnames on a listener, by the examples of Gateway API's
// HTTPRoute hostnames documentation: the intersection, the listener's when
// the route has none, the route's when the listener has none, and no
// attachment when both have some and none intersect.
func TestIntersectHostnames(t *testing.T) {
	for _, c := range []struct {
		listener string
		route    []string
		want     []string // nil: not attached
	}{
		{"", nil, []string{""}},
		{"", []string{"a.example.com"}, []string{"a.example.com"}},
		{"test.example.com", nil, []string{"test.example.com"}},
		{"test.example.com", []string{"test.example.com"}, []string{"test.example.com"}},
		{"test.example.com", []string{"*.example.com"}, []string{"test.example.com"}},
		{"test.example.com", []string{"other.example.com"}, nil},
		{"*.example.com", nil, []string{"*.example.com"}},
		{"*.example.com", []string{"*.example.com"}, []string{"*.example.com"}},
		{"*.example.com", []string{"test.example.com"}, []string{"test.example.com"}},
		{"*.example.com", []string{"foo.test.example.com"}, []string{"foo.test.example.com"}},
		{"*.example.com", []string{"example.com"}, nil},
		{"*.example.com", []string{"test.example.net"}, nil},
		// Route hostnames that do not match the listener are ignored.
		{"*.example.com", []string{"test.example.com", "test.example.net"}, []string{"test.example.com"}},
		// Two wildcards: the narrower one.
		{"*.foo.example.com", []string{"*.example.com"}, []string{"*.foo.example.com"}},
		{"*.example.com", []string{"*.foo.example.com"}, []string{"*.foo.example.com"}},
		{"*.example.com", []string{"*.example.net"}, nil},
	} {
		var lh *gatewayv1.Hostname
		if c.listener != "" {
			lh = ptr.To(gatewayv1.Hostname(c.listener))
		}
		got, ok := intersectHostnames(lh, c.route)
		if ok != (c.want != nil) || !slices.Equal(got, c.want) {
			t.Errorf("listener %q, route %q: %q attached %v, want %q", c.listener, c.route, got, ok, c.want)
		}
	}
}

// routeHosts returns the hostnames of route's rows in tbl ("" for a row
// without hostnames), sorted; nil when it has no rows.
func routeHosts(tbl *cache.Table, route string) []string {
	var out []string
	for _, r := range tbl.Rows {
		if r.Route != route {
			continue
		}
		h := ""
		if len(r.Hostnames) > 0 {
			h = r.Hostnames[0]
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// Which listeners of a Gateway take a route: parentRefs' sectionName and
// port select listeners (all when unset), allowedRoutes.namespaces (Same
// by default, All, Selector) and allowedRoutes.kinds (by protocol when
// unset) admit it, and its hostnames intersect each listener's. The route
// serves the union of what the listeners taking it give it, and a route
// no listener takes is not in the table.
func TestListenerAttachment(t *testing.T) {
	all, sel := gatewayv1.NamespacesFromAll, gatewayv1.NamespacesFromSelector
	g := gw("a", "gw")
	g.Spec.Listeners = []gatewayv1.Listener{
		{Name: "web", Port: 80, Protocol: gatewayv1.HTTPProtocolType, Hostname: ptr.To(gatewayv1.Hostname("*.example.com"))},
		{Name: "api", Port: 8080, Protocol: gatewayv1.HTTPSProtocolType, Hostname: ptr.To(gatewayv1.Hostname("api.example.com")),
			AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: &all}}},
		{Name: "tls", Port: 443, Protocol: gatewayv1.TLSProtocolType,
			AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: &all}}},
		{Name: "grpc-only", Port: 9090, Protocol: gatewayv1.HTTPProtocolType,
			AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: &all},
				Kinds: []gatewayv1.RouteGroupKind{{Kind: KindGRPCRoute}}}},
		{Name: "prod", Port: 81, Protocol: gatewayv1.HTTPProtocolType,
			AllowedRoutes: &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: &sel,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}},
	}
	ref := func(section string, port gatewayv1.PortNumber) gatewayv1.ParentReference {
		r := gatewayv1.ParentReference{Name: "gw", Namespace: ptr.To(gatewayv1.Namespace("a"))}
		if section != "" {
			r.SectionName = ptr.To(gatewayv1.SectionName(section))
		}
		if port != 0 {
			r.Port = ptr.To(port)
		}
		return r
	}
	type rc struct {
		name, ns string
		hosts    []string
		ref      gatewayv1.ParentReference
		want     []string // nil: not attached
	}
	cases := []rc{
		{"all-listeners", "a", nil, ref("", 0), []string{"*.example.com", "api.example.com"}},
		{"section-web", "a", nil, ref("web", 0), []string{"*.example.com"}},
		{"section-api", "a", nil, ref("api", 0), []string{"api.example.com"}},
		{"port-8080", "a", nil, ref("", 8080), []string{"api.example.com"}},
		{"section-and-wrong-port", "a", nil, ref("web", 8080), nil},
		{"section-missing", "a", nil, ref("nope", 0), nil},
		{"section-tls", "a", nil, ref("tls", 0), nil},
		{"section-grpc-only", "a", nil, ref("grpc-only", 0), nil},
		{"host-narrowed", "a", []string{"shop.example.com", "shop.example.net"}, ref("", 0), []string{"shop.example.com"}},
		{"host-no-intersection", "a", []string{"www.example.org"}, ref("", 0), nil},
		{"other-ns", "b", nil, ref("", 0), []string{"api.example.com"}},
		{"other-ns-section-web", "b", nil, ref("web", 0), nil},
		{"selected-ns", "prod", nil, ref("", 0), []string{"", "api.example.com"}},
		{"selected-ns-section", "prod", nil, ref("prod", 0), []string{""}},
	}
	s := &Snapshot{
		Gateways:        []*gatewayv1.Gateway{g},
		NamespaceLabels: map[string]map[string]string{"a": {"env": "dev"}, "b": {}, "prod": {"env": "prod"}},
		Policies: []*wafv1alpha1.WAFGatewayBindingPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"},
			Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Name: "crs"},
				TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: KindGateway, Name: "gw"}}}}},
	}
	for _, c := range cases {
		r := hr(c.ns, c.name, 0, c.hosts)
		r.Spec.ParentRefs = []gatewayv1.ParentReference{c.ref}
		s.HTTPRoutes = append(s.HTTPRoutes, r)
	}
	grpc := &gatewayv1.GRPCRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "grpc"},
		Spec: gatewayv1.GRPCRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{ref("grpc-only", 0)}},
			Rules: []gatewayv1.GRPCRouteRule{{}}}}
	s.GRPCRoutes = append(s.GRPCRoutes, grpc)
	res := Resolve(s)
	tbl := res.Tables[nn("a", "gw")]
	for _, c := range cases {
		key := KindHTTPRoute + "/" + c.ns + "/" + c.name
		if got := routeHosts(tbl, key); !slices.Equal(got, c.want) {
			t.Errorf("%s: hostnames %q, want %q", c.name, got, c.want)
		}
		_, affected := res.AffectedRoutes[key][nn("a", "gw")]
		if affected != (c.want != nil) {
			t.Errorf("%s: PolicyAffected %v, want %v", c.name, affected, c.want != nil)
		}
	}
	if got := routeHosts(tbl, "GRPCRoute/b/grpc"); !slices.Equal(got, []string{""}) {
		t.Errorf("GRPCRoute on a listener admitting GRPCRoutes: hostnames %q, want any", got)
	}
}

// A route-level policy on a route no listener takes has no Gateway for
// its ancestor: Programmed=False, and no table runs it.
func TestRefusedRouteHasNoGateway(t *testing.T) {
	g := gw("a", "gw")
	g.Spec.Listeners[0].Hostname = ptr.To(gatewayv1.Hostname("shop.example.com"))
	r := hr("a", "web", 0, []string{"www.example.org"})
	s := &Snapshot{
		Revision:   func(string) (string, bool) { return "rev", true },
		RuleSets:   []*wafv1alpha1.RuleSet{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "crs"}}},
		Gateways:   []*gatewayv1.Gateway{g},
		HTTPRoutes: []*gatewayv1.HTTPRoute{r},
		Policies: []*wafv1alpha1.WAFGatewayBindingPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"},
			Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Name: "crs"},
				TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: KindHTTPRoute, Name: "web"}}}}},
	}
	res := Resolve(s)
	o := res.Policies[nn("a", "p")]
	if len(o.Targets) != 1 || len(o.Targets[0].Gateways) != 0 {
		t.Fatalf("targets %+v, want the route with no Gateway", o.Targets)
	}
	st := policyStatus(wafv1alpha1.WAFGatewayBindingPolicyStatus{}, o, nil)
	if c := meta.FindStatusCondition(st.Ancestors[0].Conditions, "Programmed"); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Programmed %+v, want False", c)
	}
	if tbl := res.Tables[nn("a", "gw")]; len(tbl.Rows) != 0 || len(tbl.Policies) != 0 {
		t.Errorf("table of the Gateway the route does not attach to: %+v", tbl)
	}
}
