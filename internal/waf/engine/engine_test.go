package engine_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/engine"
)

// TestTargetConflictOldestWins: one Engine per Gateway. The older Engine
// deploys, the newer is Accepted=False TargetConflict with nothing
// deployed, and takes over when the older one goes. An Engine of another
// namespace naming a Gateway of the same name is not in the contest.
func TestTargetConflictOldestWins(t *testing.T) {
	cluster(t)
	ns := namespace(t, "conflict")
	elsewhere := namespace(t, "conflict-elsewhere")
	ruleSet(t, ns, "guard", guardRules)
	ruleSet(t, elsewhere, "guard", guardRules)
	gateway(t, ns, "edge")
	gateway(t, elsewhere, "edge")

	first := newEngine(ns, "a-first", "guard", "edge", wafv1alpha1.DriverIstioWASM)
	create(t, first)
	waitFor(t, first, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	second := newEngine(ns, "b-second", "guard", "edge", wafv1alpha1.DriverIstioWASM)
	create(t, second)
	waitFor(t, second, wafv1alpha1.ConditionAccepted, metav1.ConditionFalse, wafv1alpha1.ReasonTargetConflict)
	if c := condition(t, second, wafv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("loser Ready %+v, want False", c)
	}
	if _, ok := wasmPlugin(t, second); ok {
		t.Error("the losing Engine deployed a WasmPlugin")
	}
	eventually(t, "a TargetConflict event on the loser", func() bool { return hasEvent(t, second, wafv1alpha1.ReasonTargetConflict) })
	if c := condition(t, first, wafv1alpha1.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("winner Accepted %+v, want True", c)
	}

	neighbour := newEngine(elsewhere, "z-neighbour", "guard", "edge", wafv1alpha1.DriverIstioWASM)
	create(t, neighbour)
	waitFor(t, neighbour, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	if c := condition(t, neighbour, wafv1alpha1.ConditionAccepted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("an Engine of another namespace: Accepted %+v, want True", c)
	}

	deleteEngine(t, first)
	waitFor(t, second, wafv1alpha1.ConditionAccepted, metav1.ConditionTrue, wafv1alpha1.ReasonAccepted)
	waitFor(t, second, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	if _, ok := wasmPlugin(t, second); !ok {
		t.Error("the remaining Engine has no WasmPlugin")
	}
	if _, ok := wasmPlugin(t, first); ok {
		t.Error("the deleted Engine's WasmPlugin remains")
	}
}

// TestTargetNotFound: an Engine whose Gateway is missing (or lives in
// another namespace) is Accepted=False TargetNotFound, and attaches when
// the Gateway appears in its namespace.
func TestTargetNotFound(t *testing.T) {
	cluster(t)
	ns := namespace(t, "no-target")
	elsewhere := namespace(t, "no-target-elsewhere")
	ruleSet(t, ns, "guard", guardRules)
	gateway(t, elsewhere, "edge")
	eng := newEngine(ns, "edge-waf", "guard", "edge", wafv1alpha1.DriverIstioWASM)
	create(t, eng)
	waitFor(t, eng, wafv1alpha1.ConditionAccepted, metav1.ConditionFalse, wafv1alpha1.ReasonTargetNotFound)
	if _, ok := wasmPlugin(t, eng); ok {
		t.Error("a WasmPlugin for a missing Gateway")
	}
	gateway(t, ns, "edge")
	waitWithin(t, eng, wafv1alpha1.ConditionAccepted, metav1.ConditionTrue, wafv1alpha1.ReasonAccepted, awaitedWithin)
	waitFor(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	if _, ok := wasmPlugin(t, eng); !ok {
		t.Fatal("no WasmPlugin once the Gateway exists")
	}

	// The Gateway goes: so does the data plane attached to it.
	gw := &metav1.PartialObjectMetadata{}
	gw.SetGroupVersionKind(engine.GatewayGVK)
	gw.SetNamespace(ns)
	gw.SetName("edge")
	if err := env.Client.Delete(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	waitFor(t, eng, wafv1alpha1.ConditionAccepted, metav1.ConditionFalse, wafv1alpha1.ReasonTargetNotFound)
	eventually(t, "the WasmPlugin removed", func() bool { _, ok := wasmPlugin(t, eng); return !ok })
}

// TestRuleSetNotFoundThenReady: an Engine naming a RuleSet that does not
// exist in its namespace (one of that name in another namespace does not
// count) is Degraded RuleSetNotFound, and Ready once the RuleSet appears
// and compiles.
func TestRuleSetNotFoundThenReady(t *testing.T) {
	cluster(t)
	ns := namespace(t, "no-ruleset")
	elsewhere := namespace(t, "no-ruleset-elsewhere")
	ruleSet(t, elsewhere, "guard", guardRules)
	gateway(t, ns, "edge")
	eng := newEngine(ns, "edge-waf", "guard", "edge", wafv1alpha1.DriverIstioWASM)
	create(t, eng)
	waitFor(t, eng, wafv1alpha1.ConditionDegraded, metav1.ConditionTrue, wafv1alpha1.ReasonRuleSetNotFound)
	if c := condition(t, eng, wafv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != wafv1alpha1.ReasonRuleSetNotFound {
		t.Errorf("Ready %+v, want False/RuleSetNotFound", c)
	}
	if _, ok := wasmPlugin(t, eng); ok {
		t.Error("a WasmPlugin without a RuleSet")
	}
	ruleSet(t, ns, "guard", guardRules)
	waitWithin(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned, awaitedWithin)
	waitFor(t, eng, wafv1alpha1.ConditionDegraded, metav1.ConditionFalse, wafv1alpha1.ReasonAsExpected)
}

// TestValidation: the API server refuses Engines that cannot work, with a
// message that says what to fix.
func TestValidation(t *testing.T) {
	cluster(t)
	ns := namespace(t, "engine-validation")
	for _, tc := range []struct {
		name   string
		mutate func(*wafv1alpha1.Engine)
		want   string
	}{
		{"wasm settings on a waf-proxy Engine", func(e *wafv1alpha1.Engine) {
			e.Spec.Driver = wafv1alpha1.DriverConfig{Type: wafv1alpha1.DriverWAFProxy, Wasm: &wafv1alpha1.WasmDriverConfig{Image: "oci://x/y"}}
		}, "wasm is only for type istio-wasm"},
		{"waf-proxy settings on an istio-wasm Engine", func(e *wafv1alpha1.Engine) {
			e.Spec.Driver.WAFProxy = &wafv1alpha1.WAFProxyDriverConfig{Replicas: 1}
		}, "wafProxy is only for type waf-proxy"},
		{"a WASM image that is not OCI", func(e *wafv1alpha1.Engine) {
			e.Spec.Driver.Wasm = &wafv1alpha1.WasmDriverConfig{Image: "https://example.test/plugin.wasm"}
		}, "image must start with oci://"},
		{"an unknown failure policy", func(e *wafv1alpha1.Engine) { e.Spec.FailurePolicy = "sometimes" }, "failurePolicy"},
		{"an unknown driver", func(e *wafv1alpha1.Engine) { e.Spec.Driver.Type = "nginx" }, "driver.type"},
		{"a target that is no Gateway name", func(e *wafv1alpha1.Engine) { e.Spec.Target.Name = "Edge_GW" }, "target.name"},
		{"no RuleSet", func(e *wafv1alpha1.Engine) { e.Spec.RuleSet.Name = "" }, "ruleSet.name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := newEngine(ns, "invalid", "guard", "edge", wafv1alpha1.DriverIstioWASM)
			tc.mutate(eng)
			err := env.Client.Create(context.Background(), eng)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}

// hasEvent reports whether the Engine has an event with this reason.
func hasEvent(t *testing.T, eng *wafv1alpha1.Engine, reason string) bool {
	t.Helper()
	var list eventsv1.EventList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(eng.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Name == eng.Name && e.Regarding.UID == eng.UID && e.Reason == reason {
			return true
		}
	}
	return false
}

// TestImageNotAllowed: an Engine cannot make Portal run an image of its
// choosing (which would let anyone allowed to create an Engine run any
// code, in pods or in Envoy, without the RBAC for Deployments or
// WasmPlugins); an image under --waf-engine-allowed-images is fine.
func TestImageNotAllowed(t *testing.T) {
	cluster(t)
	ns := namespace(t, "images")
	ruleSet(t, ns, "guard", guardRules)
	for _, gw := range []string{"wasm", "proxy", "allowed"} {
		gateway(t, ns, gw)
	}
	create(t, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "proxy-gw", Labels: map[string]string{wafv1alpha1.GatewayNameLabel: "proxy"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	})

	wasm := newEngine(ns, "wasm", "guard", "wasm", wafv1alpha1.DriverIstioWASM)
	wasm.Spec.Driver.Wasm = &wafv1alpha1.WasmDriverConfig{Image: "oci://attacker.example/miner:1"}
	proxy := newEngine(ns, "proxy", "guard", "proxy", wafv1alpha1.DriverWAFProxy)
	proxy.Spec.Driver.WAFProxy = &wafv1alpha1.WAFProxyDriverConfig{Image: "attacker.example/miner:1"}
	allowed := newEngine(ns, "allowed", "guard", "allowed", wafv1alpha1.DriverIstioWASM)
	allowed.Spec.Driver.Wasm = &wafv1alpha1.WasmDriverConfig{Image: allowedImages + "coraza:2"}
	create(t, wasm, proxy, allowed)

	waitFor(t, wasm, wafv1alpha1.ConditionDegraded, metav1.ConditionTrue, wafv1alpha1.ReasonImageNotAllowed)
	waitFor(t, proxy, wafv1alpha1.ConditionDegraded, metav1.ConditionTrue, wafv1alpha1.ReasonImageNotAllowed)
	if _, ok := wasmPlugin(t, wasm); ok {
		t.Error("a WasmPlugin with an image that is not allowed")
	}
	if _, ok := object(t, appsv1.SchemeGroupVersion.WithKind("Deployment"), ns, engine.ChildName(proxy.Name)); ok {
		t.Error("a waf-proxy Deployment with an image that is not allowed")
	}
	waitFor(t, allowed, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	wp, _ := wasmPlugin(t, allowed)
	if url, _, _ := unstructured.NestedString(wp.Object, "spec", "url"); url != allowedImages+"coraza:2" {
		t.Errorf("url %q, want the allowed image", url)
	}
}
