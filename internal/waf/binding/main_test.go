package binding_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
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
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/test/waftest"
)

// The control plane, with Portal's CRDs and the Gateway API's
// (experimental channel, from the pinned module), and the WAF layer are
// shared by the tests of this package.
var (
	env    *waftest.Env
	shared = devtest.Shared{
		Options: devcluster.Options{CRDDirectoryPaths: crdPaths()},
		Setup: func(cl *devcluster.Cluster) (func() error, error) {
			e, stop, err := waftest.Start(cl, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				return nil, err
			}
			if e.Layer.Binding == nil {
				return nil, fmt.Errorf("the binding controller did not start with the Gateway API CRDs installed")
			}
			env = e
			return stop, nil
		},
	}
)

func crdPaths() []string {
	root, err := devcluster.RepoRoot()
	if err != nil {
		panic(err)
	}
	third, err := devcluster.ThirdPartyCRDPaths(devcluster.GatewayAPIExperimental)
	if err != nil {
		panic(err)
	}
	return append([]string{filepath.Join(root, "deploy", "crds")}, third...)
}

func TestMain(m *testing.M) { shared.Main(m) }

func start(t *testing.T) context.Context {
	t.Helper()
	shared.Cluster(t)
	return context.Background()
}

var nsCounter atomic.Int64

// namespace creates a fresh namespace named after prefix.
func namespace(t *testing.T, prefix string, labels ...string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, nsCounter.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(labels); i += 2 {
		ns.Labels[labels[i]] = labels[i+1]
	}
	create(t, ns)
	return name
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func remove(t *testing.T, o client.Object) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), o); err != nil {
		t.Fatalf("delete %T %s: %v", o, o.GetName(), err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	devtest.Eventually(t, what, cond)
}

// ruleSet creates a RuleSource and RuleSet with rules and waits for its
// revision in the cache; it returns the revision's uuid.
func ruleSet(t *testing.T, ns, name, rules string, perms *wafv1alpha1.OverridePermissions) string {
	t.Helper()
	create(t,
		&wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: wafv1alpha1.RuleSourceSpec{Rules: rules}},
		&wafv1alpha1.RuleSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: wafv1alpha1.RuleSetSpec{Sources: []wafv1alpha1.SourceReference{{Name: name}}, Overrides: perms}},
	)
	var uuid string
	waitFor(t, time.Minute, "rule set "+ns+"/"+name+" cached", func() bool {
		e, ok := env.Layer.Cache.Get(cache.Key(ns, name))
		uuid = e.UUID
		return ok
	})
	return uuid
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	// The reaction times docs/performance.md quotes (go test -v).
	t.Logf("%s after %s", what, time.Since(start).Round(time.Millisecond))
}

// gateway creates a Gateway with one HTTP listener that admits routes
// from the namespaces from says (Same when empty).
func gateway(t *testing.T, ns, name string, from gatewayv1.FromNamespaces) *gatewayv1.Gateway {
	t.Helper()
	l := gatewayv1.Listener{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType}
	if from != "" {
		l.AllowedRoutes = &gatewayv1.AllowedRoutes{Namespaces: &gatewayv1.RouteNamespaces{From: &from}}
	}
	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: "example", Listeners: []gatewayv1.Listener{l}}}
	create(t, g)
	return g
}

// httpRoute creates an HTTPRoute attached to Gateway gwNS/gw that
// matches hostname (any when empty) and path prefix.
func httpRoute(t *testing.T, ns, name, gwNS, gw, hostname, prefix string) *gatewayv1.HTTPRoute {
	t.Helper()
	r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
				Name: gatewayv1.ObjectName(gw), Namespace: ptr.To(gatewayv1.Namespace(gwNS))}}},
			Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{
				Path: &gatewayv1.HTTPPathMatch{Type: ptr.To(gatewayv1.PathMatchPathPrefix), Value: ptr.To(prefix)}}}}},
		}}
	if hostname != "" {
		r.Spec.Hostnames = []gatewayv1.Hostname{gatewayv1.Hostname(hostname)}
	}
	create(t, r)
	return r
}

// policy creates a WAFGatewayBindingPolicy on targets of kind, running
// RuleSet rsNS/rs (rsNS empty: the policy's namespace).
func policy(t *testing.T, ns, name, kind string, targets []string, rsNS, rs string) *wafv1alpha1.WAFGatewayBindingPolicy {
	t.Helper()
	p := &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: wafv1alpha1.WAFGatewayBindingPolicySpec{RuleSet: &wafv1alpha1.RuleSetReference{Namespace: rsNS, Name: rs}}}
	for _, tg := range targets {
		p.Spec.TargetRefs = append(p.Spec.TargetRefs, gatewayv1.LocalPolicyTargetReference{
			Group: gatewayv1.GroupName, Kind: gatewayv1.Kind(kind), Name: gatewayv1.ObjectName(tg)})
	}
	create(t, p)
	return p
}

// table returns the route table the cache serves for a Gateway.
func table(ns, gw string) *cache.Table {
	t, _ := env.Layer.Cache.GetTable(ns, gw)
	return t
}

// routePolicy returns the policy (namespace/name) and rule set of the
// first row of route (Kind/namespace/name) in t; "" when it has none.
func routePolicy(t *cache.Table, route string) (policy, ruleSet string) {
	if t == nil {
		return "", ""
	}
	for _, r := range t.Rows {
		if r.Route != route || r.Policy < 0 {
			continue
		}
		p := t.Policies[r.Policy]
		if p.RuleSet != nil {
			return p.Policy, cache.Key(p.RuleSet.Namespace, p.RuleSet.Name)
		}
		return p.Policy, ""
	}
	return "", ""
}

// ancestorCondition returns condition typ of the policy's ancestor named
// name.
func ancestorCondition(t *testing.T, ns, name, ancestor, typ string) *metav1.Condition {
	t.Helper()
	var p wafv1alpha1.WAFGatewayBindingPolicy
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	for _, a := range p.Status.Ancestors {
		if string(a.AncestorRef.Name) == ancestor {
			return meta.FindStatusCondition(a.Conditions, typ)
		}
	}
	return nil
}

func hasReason(c *metav1.Condition, status metav1.ConditionStatus, reason string) bool {
	return c != nil && c.Status == status && c.Reason == reason
}
