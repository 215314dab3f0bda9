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
