package engine_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/engine"
	"github.com/vilaca/portal/internal/waf/proxy"
)

// strictRules block requests with ?strict=1.
const strictRules = "SecRuleEngine On\nSecRule ARGS:strict \"@streq 1\" \"id:2001,phase:1,deny,status:403\"\n"

// TestWAFProxyDriverPerRouteTraffic: the data plane a waf-proxy Engine
// describes (its Deployment's --gateway and --ruleset, its ServiceAccount's
// token for the projected audience) enforces, on real traffic, the rule set
// a WAFGatewayBindingPolicy attaches to one route, and the Engine's RuleSet
// on the route no policy covers and on paths no route matches.
func TestWAFProxyDriverPerRouteTraffic(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	ns := namespace(t, "proxy-traffic")
	ruleSet(t, ns, "guard", guardRules)
	ruleSet(t, ns, "strict", strictRules)
	gateway(t, ns, "edge")
	svc(t, ns, "edge-istio", "edge", 80)
	for name, prefix := range map[string]string{"checkout": "/checkout", "catalog": "/catalog"} {
		create(t, &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gatewayv1.HTTPRouteSpec{
				CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "edge"}}},
				Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{
					Path: &gatewayv1.HTTPPathMatch{Type: ptr.To(gatewayv1.PathMatchPathPrefix), Value: ptr.To(prefix)}}}}},
			}})
	}
	create(t, &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "checkout-strict"},
		Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{
			TargetRefs: []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Name: "checkout"}},
			RuleSet:    &wafv1alpha1.RuleSetReference{Name: "strict"},
		}})
	eng := newEngine(ns, "edge-waf", "guard", "edge", wafv1alpha1.DriverWAFProxy)
	create(t, eng)
	waitFor(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)

	// What the Deployment tells the proxy.
	var dep appsv1.Deployment
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: engine.ChildName(eng.Name)}, &dep); err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	args := map[string]string{}
	for _, a := range pod.Containers[0].Args {
		if k, v, ok := strings.Cut(a, "="); ok {
			args[k] = v
		}
	}
	audience := ""
	for _, v := range pod.Volumes {
		if v.Projected != nil && v.Projected.Sources[0].ServiceAccountToken != nil {
			audience = v.Projected.Sources[0].ServiceAccountToken.Audience
		}
	}
	gwNS, gw, err := proxy.ParseRuleSet(args["--gateway"])
	if err != nil {
		t.Fatalf("--gateway %q: %v", args["--gateway"], err)
	}
	rsNS, rs, err := proxy.ParseRuleSet(args["--ruleset"])
	if err != nil {
		t.Fatalf("--ruleset %q: %v", args["--ruleset"], err)
	}
	token, err := env.Token(ctx, ns, pod.ServiceAccountName, audience)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := env.NewClient(token)
	if err != nil {
		t.Fatal(err)
	}

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(upstream.Close)
	up, _ := url.Parse(upstream.URL)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newProxy := func(l *slog.Logger) *proxy.Proxy { return &proxy.Proxy{Upstream: up, Logger: l} }
	deflt := newProxy(log)
	t.Cleanup(deflt.Close)
	router := &proxy.Router{Logger: log, NewProxy: newProxy, Default: deflt}
	tables := &proxy.TablePoller{Client: cc, Namespace: gwNS, Gateway: gw, Target: router, Logger: log}
	rules := &proxy.Poller{Client: cc, Namespace: rsNS, Name: rs, Target: deflt, Logger: log}
	front := httptest.NewServer(router)
	t.Cleanup(front.Close)
	get := func(path string) int {
		resp, err := front.Client().Get(front.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	eventually(t, "the proxy loads the Engine's RuleSet and the Gateway's table with the policy", func() bool {
		_, _ = rules.Poll(ctx)
		_, _ = tables.Poll(ctx)
		_, ok := router.Current()
		return ok && get("/checkout?strict=1") == http.StatusForbidden
	})
	for path, want := range map[string]int{
		"/checkout?strict=1": http.StatusForbidden, // the policy's rule set
		"/checkout?attack=1": http.StatusOK,        // ... instead of the Engine's
		"/catalog?attack=1":  http.StatusForbidden, // no policy: the Engine's RuleSet
		"/catalog?strict=1":  http.StatusOK,
		"/other?attack=1":    http.StatusForbidden, // no route: the Engine's RuleSet
		"/catalog":           http.StatusOK,
	} {
		if got := get(path); got != want {
			t.Errorf("GET %s: %d, want %d", path, got, want)
		}
	}
}
