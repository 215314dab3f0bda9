package engine_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/engine"
	"github.com/vilaca/portal/internal/waf/proxy"
	"github.com/vilaca/portal/test/waftest"
)

// svc creates the Service a Gateway implementation deploys for a Gateway.
func svc(t *testing.T, ns, name, gw string, port int32) {
	t.Helper()
	create(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{wafv1alpha1.GatewayNameLabel: gw}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: port}}},
	})
}

// TestWAFProxyDriver: a waf-proxy Engine gets a `portal waf-proxy`
// Deployment in front of the Gateway's Service, with the arguments, the
// projected cache token (the Engine's RuleSet audience) and the cache CA
// it needs, a Service and a PodDisruptionBudget; all are removed with the
// Engine.
func TestWAFProxyDriver(t *testing.T) {
	cluster(t)
	ns := namespace(t, "proxy")
	ruleSet(t, ns, "guard", guardRules)
	gateway(t, ns, "edge")
	eng := newEngine(ns, "edge-waf", "guard", "edge", wafv1alpha1.DriverWAFProxy)
	eng.Spec.Driver.WAFProxy = &wafv1alpha1.WAFProxyDriverConfig{Replicas: 3, Port: 8080}
	eng.Spec.RuleSetCacheServer = &wafv1alpha1.RuleSetCacheServerConfig{PollIntervalSeconds: 5}
	create(t, eng)
	waitFor(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionFalse, wafv1alpha1.ReasonTargetServiceNotFound)

	svc(t, ns, "edge-istio", "edge", 8443)
	// A Service without the Gateway's label is not the upstream.
	create(t, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "aaa-unrelated"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}}})
	// The watch on Gateway Services picks it up, long before the resync.
	waitWithin(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned, awaitedWithin)

	name := engine.ChildName(eng.Name)
	key := client.ObjectKey{Namespace: ns, Name: name}
	dep, audience, caMap := checkProxyDeployment(t, ns, name)
	npName := checkProxyNeighbours(t, eng, key, dep)
	checkProxyTokenScope(t, ns, name, audience)
	checkProxyChildrenDeleted(t, eng, ns, name, caMap, npName)
}

// checkProxyDeployment checks the waf-proxy Deployment of Engine child name:
// replicas, image, arguments, a ServiceAccount without the API token, and a
// projected token for the cache with the cache's CA beside it. It returns the
// Deployment, the token's audience and the CA ConfigMap's name.
func checkProxyDeployment(t *testing.T, ns, name string) (appsv1.Deployment, string, string) {
	t.Helper()
	key := client.ObjectKey{Namespace: ns, Name: name}
	var dep appsv1.Deployment
	if err := env.Client.Get(context.Background(), key, &dep); err != nil {
		t.Fatalf("Deployment: %v", err)
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", dep.Spec.Replicas)
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("containers %d, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != proxyImage {
		t.Errorf("image %q, want %q", c.Image, proxyImage)
	}
	wantArgs := []string{
		"waf-proxy",
		fmt.Sprintf("--cache-url=https://%s.%s.svc:18080", waf.DefaultCacheService, waftest.Namespace),
		"--gateway=" + ns + "/edge",
		"--ruleset=" + ns + "/guard",
		"--upstream=http://edge-istio." + ns + ".svc:8443",
		"--ca-file=" + engine.ProxyCAPath,
		"--token-file=" + engine.ProxyTokenPath,
		"--poll-interval=5s",
		"--failure-policy=fail",
		"--listen=:8000",
		"--metrics-bind-address=:9090",
		// The proxy's own defaults, which the pod's memory limit assumes.
		fmt.Sprintf("--max-request-body-bytes=%d", proxy.DefaultMaxRequestBodyBytes),
		fmt.Sprintf("--max-response-body-bytes=%d", proxy.DefaultMaxResponseBodyBytes),
	}
	if !slices.Equal(c.Args, wantArgs) {
		t.Errorf("args\n got %q\nwant %q", c.Args, wantArgs)
	}
	if pod.ServiceAccountName != name || pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("pod ServiceAccount %q automount %v: want %q without the API token", pod.ServiceAccountName, pod.AutomountServiceAccountToken, name)
	}
	var audience, caMap string
	for _, v := range pod.Volumes {
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ServiceAccountToken != nil {
					audience = s.ServiceAccountToken.Audience
				}
			}
		}
		if v.ConfigMap != nil {
			caMap = v.ConfigMap.Name
		}
	}
	if audience != cache.Audience {
		t.Errorf("projected token audience %q, want %q", audience, cache.Audience)
	}
	var cm corev1.ConfigMap
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: caMap}, &cm); err != nil {
		t.Fatalf("CA ConfigMap %q: %v", caMap, err)
	}
	if cm.Data["ca.crt"] != string(env.Layer.Certs.CABundle()) {
		t.Error("the CA ConfigMap does not hold the cache's CA")
	}
	return dep, audience, caMap
}

// checkProxyNeighbours checks the Service, PodDisruptionBudget and cache
// NetworkPolicy that go with the proxy pods, and that no WasmPlugin does. It
// returns the NetworkPolicy's name.
func checkProxyNeighbours(t *testing.T, eng *wafv1alpha1.Engine, key client.ObjectKey, dep appsv1.Deployment) string {
	t.Helper()
	ns := key.Namespace
	var s corev1.Service
	if err := env.Client.Get(context.Background(), key, &s); err != nil {
		t.Fatalf("Service: %v", err)
	}
	if !maps.Equal(s.Spec.Selector, dep.Spec.Template.Labels) || len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 8080 {
		t.Errorf("Service selector %v ports %+v: want the proxy pods on 8080", s.Spec.Selector, s.Spec.Ports)
	}
	var pdb policyv1.PodDisruptionBudget
	if err := env.Client.Get(context.Background(), key, &pdb); err != nil {
		t.Fatalf("PodDisruptionBudget: %v", err)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !maps.Equal(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
		t.Errorf("PDB %+v: want maxUnavailable 1 over the proxy pods", pdb.Spec)
	}
	var np networkingv1.NetworkPolicy
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: waftest.Namespace, Name: engine.NetworkPolicyName(ns, eng.Name)}, &np); err != nil {
		t.Fatalf("cache NetworkPolicy: %v", err)
	}
	if !maps.Equal(np.Spec.Ingress[0].From[0].PodSelector.MatchLabels, dep.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy admits %v, want the proxy pods", np.Spec.Ingress[0].From[0].PodSelector.MatchLabels)
	}
	if _, ok := wasmPlugin(t, eng); ok {
		t.Error("a waf-proxy Engine has a WasmPlugin")
	}
	return np.Name
}

// checkProxyTokenScope checks what the proxy's token reads from the cache:
// its RuleSet and its Gateway's table, and nothing of another namespace.
func checkProxyTokenScope(t *testing.T, ns, name, audience string) {
	t.Helper()
	// A token for the proxy's audience (what the kubelet projects) reads
	// the RuleSet.
	tok, err := env.Token(context.Background(), ns, name, audience)
	if err != nil {
		t.Fatal(err)
	}
	if code := readStatus(t, tok, ns, "guard"); code != 200 {
		t.Errorf("the proxy's token: %d, want 200", code)
	}
	// It reads its own Gateway's route table (what --gateway polls), and
	// is refused another namespace's table and rule set.
	other := namespace(t, "proxy-other")
	ruleSet(t, other, "guard", guardRules)
	gateway(t, other, "edge")
	otherTok, err := env.Token(context.Background(), other, "reader", cache.Audience)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other namespace's Gateway table served", func() bool { return readTable(t, otherTok, other, "edge") == 200 })
	eventually(t, "the proxy's token reads its Gateway's table", func() bool { return readTable(t, tok, ns, "edge") == 200 })
	if code := readTable(t, tok, other, "edge"); code != 403 {
		t.Errorf("the proxy's token on another namespace's table: %d, want 403", code)
	}
	if code := readStatus(t, tok, other, "guard"); code != 403 {
		t.Errorf("the proxy's token on another namespace's RuleSet: %d, want 403", code)
	}
}

// checkProxyChildrenDeleted deletes the Engine and checks that every object
// made for it went with it.
func checkProxyChildrenDeleted(t *testing.T, eng *wafv1alpha1.Engine, ns, name, caMap, npName string) {
	t.Helper()
	deleteEngine(t, eng)
	for _, o := range []struct {
		gvk schema.GroupVersionKind
		ns  string
		n   string
	}{
		{appsv1.SchemeGroupVersion.WithKind("Deployment"), ns, name},
		{corev1.SchemeGroupVersion.WithKind("Service"), ns, name},
		{policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), ns, name},
		{corev1.SchemeGroupVersion.WithKind("ConfigMap"), ns, caMap},
		{corev1.SchemeGroupVersion.WithKind("ServiceAccount"), ns, name},
		{networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), waftest.Namespace, npName},
	} {
		if _, ok := object(t, o.gvk, o.ns, o.n); ok {
			t.Errorf("%s %s/%s outlived its Engine", o.gvk.Kind, o.ns, o.n)
		}
	}
}

// TestDriverSwitch: moving an Engine from istio-wasm to waf-proxy removes
// the WasmPlugin as the proxy comes up, so the two never both enforce.
func TestDriverSwitch(t *testing.T) {
	cluster(t)
	ns := namespace(t, "switch")
	ruleSet(t, ns, "guard", guardRules)
	gateway(t, ns, "edge")
	svc(t, ns, "edge-istio", "edge", 80)
	eng := newEngine(ns, "edge-waf", "guard", "edge", wafv1alpha1.DriverIstioWASM)
	create(t, eng)
	waitFor(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	if _, ok := wasmPlugin(t, eng); !ok {
		t.Fatal("no WasmPlugin")
	}
	patch := client.MergeFrom(eng.DeepCopy())
	eng.Spec.Driver.Type = wafv1alpha1.DriverWAFProxy
	if err := env.Client.Patch(context.Background(), eng, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	if _, ok := wasmPlugin(t, eng); ok {
		t.Error("the WasmPlugin remains after the switch to waf-proxy")
	}
	if _, ok := object(t, appsv1.SchemeGroupVersion.WithKind("Deployment"), ns, engine.ChildName(eng.Name)); !ok {
		t.Error("no waf-proxy Deployment after the switch")
	}
}

// readTable reads a Gateway's route table with this token, as the
// waf-proxy's --gateway does, and returns the HTTP status.
func readTable(t *testing.T, token, ns, gw string) int {
	t.Helper()
	c, err := env.NewClient(token)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.TableLatest(context.Background(), ns, gw)
	return statusOf(t, err)
}
