package binding_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/proxy"
)

const crsRules = "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nSecRuleEngine On\nInclude @owasp_crs/*.conf\n"

// override creates a RuleSetOverride on HTTPRoute route disabling tags.
func override(t *testing.T, ns, name, route string, tags ...string) {
	t.Helper()
	create(t, &wafv1alpha1.RuleSetOverride{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: wafv1alpha1.RuleSetOverrideSpec{
			TargetRefs:  []gatewayv1.LocalPolicyTargetReference{{Group: gatewayv1.GroupName, Kind: "HTTPRoute", Name: gatewayv1.ObjectName(route)}},
			DisableTags: tags,
		}})
}

func overrideAccepted(t *testing.T, ns, name string) *metav1.Condition {
	t.Helper()
	var o wafv1alpha1.RuleSetOverride
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &o); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(o.Status.Conditions, "Accepted")
}

// Traffic through a waf-proxy of the Gateway, fed by the cache over TLS
// with the Gateway namespace's token: the same CRS attack is blocked on
// the route that runs the platform's rule set as is, and let through on
// the route whose RuleSetOverride disables that attack's rules, which the
// RuleSet permits. An override the RuleSet does not permit changes
// nothing.
func TestTrafficPerRouteWithOverride(t *testing.T) {
	ctx := start(t)
	ns := namespace(t, "traffic")
	ruleSet(t, ns, "crs", crsRules, &wafv1alpha1.OverridePermissions{Tags: []string{"attack-xss"}})
	gateway(t, ns, "gw", "")
	httpRoute(t, ns, "admin", ns, "gw", "", "/admin")
	httpRoute(t, ns, "legacy", ns, "gw", "", "/legacy")
	policy(t, ns, "platform", "Gateway", []string{"gw"}, "", "crs")
	override(t, ns, "legacy-xss", "legacy", "attack-xss")
	override(t, ns, "admin-sqli", "admin", "attack-sqli")
	eventually(t, "the permitted override Accepted, the other NotPermitted", func() bool {
		return hasReason(overrideAccepted(t, ns, "legacy-xss"), metav1.ConditionTrue, "Accepted") &&
			hasReason(overrideAccepted(t, ns, "admin-sqli"), metav1.ConditionFalse, wafv1alpha1.ReasonNotPermitted)
	})
	var o wafv1alpha1.RuleSetOverride
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "legacy-xss"}, &o); err != nil {
		t.Fatal(err)
	}
	if len(o.Status.Routes) != 1 || !slices.Equal(o.Status.Routes[0].DisabledTags, []string{"attack-xss"}) ||
		o.Status.Routes[0].RuleSet == nil || o.Status.Routes[0].RuleSet.Name != "crs" {
		t.Fatalf("effective rules of the override: %+v", o.Status.Routes)
	}

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	t.Cleanup(upstream.Close)
	up, _ := url.Parse(upstream.URL)
	token, err := env.Token(ctx, ns, "waf-proxy", cache.Audience)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := env.NewClient(token)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	router := &proxy.Router{Logger: log, NewProxy: func(l *slog.Logger) *proxy.Proxy { return &proxy.Proxy{Upstream: up, Logger: l} }}
	poller := &proxy.TablePoller{Client: cc, Namespace: ns, Gateway: "gw", Target: router, Logger: log}
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
	xss := "?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E"
	waitFor(t, 2*time.Minute, "the waf-proxy to load the Gateway's table with the override", func() bool {
		_, _ = poller.Poll(ctx)
		return get("/legacy"+xss) == http.StatusOK
	})
	for path, want := range map[string]int{
		"/admin" + xss:  http.StatusForbidden,
		"/legacy" + xss: http.StatusOK,
		"/legacy/page":  http.StatusOK,
		"/other" + xss:  http.StatusForbidden, // no route: the Gateway's policy
		"/admin" + "?q=1%27%20OR%20%271%27%3D%271": http.StatusForbidden,
	} {
		if got := get(path); got != want {
			t.Errorf("GET %s: %d, want %d", path, got, want)
		}
	}
}
