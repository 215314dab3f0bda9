package engine_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	istioclient "istio.io/client-go/pkg/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/engine"
	"github.com/vilaca/portal/test/waftest"
)

// pluginConfig returns the WasmPlugin's spec.pluginConfig.
func pluginConfig(t *testing.T, wp *unstructured.Unstructured) map[string]any {
	t.Helper()
	pc, ok, err := unstructured.NestedMap(wp.Object, "spec", "pluginConfig")
	if !ok || err != nil {
		t.Fatalf("WasmPlugin %s has no spec.pluginConfig (%v)", wp.GetName(), err)
	}
	return pc
}

// readStatus reads ns/name from the cache with token and returns the HTTP
// status the cache answered (200 when it read).
func readStatus(t *testing.T, token, ns, name string) int {
	t.Helper()
	c, err := env.NewClient(token)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Entry(context.Background(), ns, name)
	return statusOf(t, err)
}

// statusOf is the HTTP status a cache client's call ended with.
func statusOf(t *testing.T, err error) int {
	t.Helper()
	switch {
	case err == nil:
		return 200
	case errors.Is(err, cache.ErrNotFound):
		return 404
	}
	for _, code := range []int{401, 403, 503} {
		if strings.Contains(err.Error(), fmt.Sprintf(": %d ", code)) {
			return code
		}
	}
	t.Fatalf("read the cache: %v", err)
	return 0
}

// TestWasmPluginConfig: an istio-wasm Engine gets a WasmPlugin whose
// pluginConfig carries exactly the keys the Coraza WASM plugin reads, with
// a token that reads the Engine's RuleSet from the cache and nothing else;
// a NetworkPolicy lets only the Gateway's pods reach the cache; the
// ServiceEntry and a DestinationRule make the cache known to the mesh.
func TestWasmPluginConfig(t *testing.T) {
	cluster(t)
	ns := namespace(t, "wasm-config")
	other := namespace(t, "wasm-config-other")
	rs := ruleSet(t, ns, "guard", guardRules)
	ruleSet(t, ns, "second", guardRules)
	ruleSet(t, other, "guard", guardRules)
	gateway(t, ns, "edge")
	eng := newEngine(ns, "edge-waf", "guard", "edge", wafv1alpha1.DriverIstioWASM)
	eng.Spec.FailurePolicy = wafv1alpha1.FailurePolicyAllow
	eng.Spec.RuleSetCacheServer = &wafv1alpha1.RuleSetCacheServerConfig{PollIntervalSeconds: 7}
	create(t, eng)
	waitFor(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	waitFor(t, eng, wafv1alpha1.ConditionAccepted, metav1.ConditionTrue, wafv1alpha1.ReasonAccepted)
	if got := eng.Status.MatchedGateways; len(got) != 1 || got[0].Name != "edge" {
		t.Errorf("matchedGateways %+v, want [edge]", got)
	}
	if eng.Status.RuleSetRevision != rs.Status.CachedRevision.UUID {
		t.Errorf("ruleSetRevision %q, want the RuleSet's %q", eng.Status.RuleSetRevision, rs.Status.CachedRevision.UUID)
	}

	pc := checkWasmPlugin(t, eng, ns)
	// The token does what the plugin needs and no more.
	token, _ := pc["cache_token"].(string)
	if code := readStatus(t, token, ns, "guard"); code != 200 {
		t.Errorf("the Engine's token reading its RuleSet: %d, want 200", code)
	}
	if code := readStatus(t, token, other, "guard"); code != 401 && code != 403 {
		t.Errorf("the Engine's token reading another namespace's RuleSet: %d, want a refusal", code)
	}
	if code := readStatus(t, token, ns, "second"); code != 401 && code != 403 {
		t.Errorf("the Engine's token reading another RuleSet of its namespace: %d, want a refusal", code)
	}

	npName := checkCacheNetworkPolicy(t, eng, ns)
	checkCacheKnownToMesh(t, eng, ns)

	deleteEngine(t, eng)
	if _, ok := wasmPlugin(t, eng); ok {
		t.Error("the WasmPlugin outlived its Engine")
	}
	if _, ok := object(t, networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), waftest.Namespace, npName); ok {
		t.Error("the cache NetworkPolicy outlived its Engine")
	}
}

// checkWasmPlugin checks the Engine's WasmPlugin: exactly the keys the
// Coraza WASM plugin reads, with their values, as Istio's own types decode
// them, owned by the Engine. It returns the pluginConfig.
func checkWasmPlugin(t *testing.T, eng *wafv1alpha1.Engine, ns string) map[string]any {
	t.Helper()
	wp, ok := wasmPlugin(t, eng)
	if !ok {
		t.Fatal("no WasmPlugin")
	}
	pc := pluginConfig(t, wp)
	keys := slices.Sorted(maps.Keys(pc))
	want := []string{"cache_server_cluster", "cache_server_instance", "cache_token", "engine", "failure_policy", "namespace", "rule_reload_interval_seconds"}
	if !slices.Equal(keys, want) {
		t.Fatalf("pluginConfig keys %v, want %v", keys, want)
	}
	for k, v := range map[string]any{
		"cache_server_instance":        ns + "/guard",
		"cache_server_cluster":         fmt.Sprintf("outbound|18080||%s.%s.svc.cluster.local", waf.DefaultCacheService, waftest.Namespace),
		"failure_policy":               "allow",
		"rule_reload_interval_seconds": int64(7),
		"engine":                       "edge-waf",
		"namespace":                    ns,
	} {
		if pc[k] != v {
			t.Errorf("pluginConfig[%s] = %#v, want %#v", k, pc[k], v)
		}
	}
	if url, _, _ := unstructured.NestedString(wp.Object, "spec", "url"); url != wasmImage {
		t.Errorf("url %q, want %q", url, wasmImage)
	}
	if sel, _, _ := unstructured.NestedStringMap(wp.Object, "spec", "selector", "matchLabels"); !maps.Equal(sel, map[string]string{wafv1alpha1.GatewayNameLabel: "edge"}) {
		t.Errorf("selector %v, want the Gateway's pods", sel)
	}
	// Istio's own types decode what Portal wrote, as istiod will.
	ic, err := istioclient.NewForConfig(shared.Cluster(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	typed, err := ic.ExtensionsV1alpha1().WasmPlugins(ns).Get(context.Background(), wp.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read the WasmPlugin with Istio's client: %v", err)
	}
	if f := typed.Spec.GetPluginConfig().GetFields(); f["cache_server_instance"].GetStringValue() != ns+"/guard" ||
		f["rule_reload_interval_seconds"].GetNumberValue() != 7 || f["failure_policy"].GetStringValue() != "allow" ||
		typed.Spec.GetUrl() != wasmImage || typed.Spec.GetSelector().GetMatchLabels()[wafv1alpha1.GatewayNameLabel] != "edge" {
		t.Errorf("Istio reads the WasmPlugin as %v", typed.Spec.String())
	}
	if refs := wp.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != eng.UID {
		t.Errorf("owner references %+v, want the Engine", refs)
	}
	return pc
}

// checkCacheNetworkPolicy checks that the cache's NetworkPolicy for the
// Engine lets only the Gateway's pods reach the cache port, and returns its
// name.
func checkCacheNetworkPolicy(t *testing.T, eng *wafv1alpha1.Engine, ns string) string {
	t.Helper()
	var np networkingv1.NetworkPolicy
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: waftest.Namespace, Name: engine.NetworkPolicyName(ns, eng.Name)}, &np); err != nil {
		t.Fatalf("cache NetworkPolicy: %v", err)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 || len(np.Spec.Ingress[0].Ports) != 1 {
		t.Fatalf("NetworkPolicy ingress %+v: want one peer on one port", np.Spec.Ingress)
	}
	peer := np.Spec.Ingress[0].From[0]
	if !maps.Equal(peer.NamespaceSelector.MatchLabels, map[string]string{"kubernetes.io/metadata.name": ns}) ||
		!maps.Equal(peer.PodSelector.MatchLabels, map[string]string{wafv1alpha1.GatewayNameLabel: "edge"}) {
		t.Errorf("NetworkPolicy peer %+v: want the Gateway's pods of %s", peer, ns)
	}
	if p := np.Spec.Ingress[0].Ports[0].Port; p == nil || p.IntValue() != 18080 {
		t.Errorf("NetworkPolicy port %v, want 18080", p)
	}
	return np.Name
}

// checkCacheKnownToMesh checks the ServiceEntry and DestinationRule that
// make the cache known to the mesh.
func checkCacheKnownToMesh(t *testing.T, eng *wafv1alpha1.Engine, ns string) {
	t.Helper()
	se, ok := object(t, engine.ServiceEntryGVK, waftest.Namespace, operatorName+"-waf-cache")
	if !ok {
		t.Fatal("no ServiceEntry for the cache (--operator-name is set)")
	}
	host := fmt.Sprintf("%s.%s.svc.cluster.local", waf.DefaultCacheService, waftest.Namespace)
	if hosts, _, _ := unstructured.NestedStringSlice(se.Object, "spec", "hosts"); !slices.Equal(hosts, []string{host}) {
		t.Errorf("ServiceEntry hosts %v, want [%s]", hosts, host)
	}
	if _, ok := object(t, engine.DestinationRuleGVK, ns, engine.ChildName(eng.Name)); !ok {
		t.Fatal("no DestinationRule for the cache (TestMeshTLSTrustsCacheCA checks it)")
	}
}

// TestTokenRenewal: Portal keeps the WasmPlugin's token while it is fresh,
// renews it once the controller's clock passes its renewal time (a fifth of
// its lifetime before it expires), and the new one reads the RuleSet.
func TestTokenRenewal(t *testing.T) {
	cluster(t)
	ns := namespace(t, "wasm-renew")
	ruleSet(t, ns, "guard", guardRules)
	gateway(t, ns, "edge")
	eng := newEngine(ns, "edge-waf", "guard", "edge", wafv1alpha1.DriverIstioWASM)
	create(t, eng)
	waitFor(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	wp, _ := wasmPlugin(t, eng)
	first, _ := pluginConfig(t, wp)["cache_token"].(string)
	firstExpiry := eng.Status.TokenExpiresAt
	if first == "" || firstExpiry == nil {
		t.Fatalf("token %q, expiry %v: want both", first, firstExpiry)
	}
	// reconcileWith changes the poll interval, which the controller writes
	// into the WasmPlugin in the same apply as the token.
	reconcileWith := func(seconds int32) string {
		t.Helper()
		patch := client.MergeFrom(eng.DeepCopy())
		eng.Spec.RuleSetCacheServer = &wafv1alpha1.RuleSetCacheServerConfig{PollIntervalSeconds: seconds}
		if err := env.Client.Patch(context.Background(), eng, patch); err != nil {
			t.Fatal(err)
		}
		var token string
		eventually(t, fmt.Sprintf("the WasmPlugin polling every %ds", seconds), func() bool {
			wp, ok := wasmPlugin(t, eng)
			if !ok {
				return false
			}
			pc := pluginConfig(t, wp)
			token, _ = pc["cache_token"].(string)
			return pc["rule_reload_interval_seconds"] == int64(seconds)
		})
		return token
	}
	if got := reconcileWith(21); got != first {
		t.Error("the token changed before its renewal time")
	}

	clock.SetTime(firstExpiry.Add(-tokenRenewBefore + time.Second))
	renewed := reconcileWith(22)
	if renewed == "" || renewed == first {
		t.Fatal("the token was not renewed past its renewal time")
	}
	if code := readStatus(t, renewed, ns, "guard"); code != 200 {
		t.Errorf("renewed token: %d, want 200", code)
	}
	// Minted within a second of the first, the new token may expire in the
	// same second: the status is checked against the token itself.
	exp := expiry(t, renewed)
	eventually(t, "status.tokenExpiresAt of the renewed token", func() bool {
		condition(t, eng, wafv1alpha1.ConditionReady)
		return eng.Status.TokenExpiresAt != nil && eng.Status.TokenExpiresAt.Unix() == exp
	})
}

// expiry is the exp claim of a ServiceAccount token.
func expiry(t *testing.T, token string) int64 {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts, want a JWT's 3", len(parts))
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil || claims.Exp == 0 {
		t.Fatalf("token claims %s: %v", raw, err)
	}
	return claims.Exp
}

// TestUnsupportedRules: the istio-wasm driver refuses a RuleSet whose
// revision holds rules the WASM build cannot run, deploys nothing, and
// accepts it once the RuleSet acknowledges them.
func TestUnsupportedRules(t *testing.T) {
	cluster(t)
	ns := namespace(t, "wasm-unsupported")
	// 920171 is on the Istio WASM list (ruleset/unsupported.go).
	rs := ruleSet(t, ns, "crs-like", "SecRuleEngine On\nSecRule REQUEST_METHOD \"@streq GET\" \"id:920171,phase:1,pass,nolog\"\n")
	gateway(t, ns, "edge")
	eng := newEngine(ns, "edge-waf", "crs-like", "edge", wafv1alpha1.DriverIstioWASM)
	create(t, eng)
	waitFor(t, eng, wafv1alpha1.ConditionDegraded, metav1.ConditionTrue, wafv1alpha1.ReasonUnsupportedRules)
	if c := condition(t, eng, wafv1alpha1.ConditionDegraded); !strings.Contains(c.Message, "920171") {
		t.Errorf("message %q does not name the rule", c.Message)
	}
	if c := condition(t, eng, wafv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Ready %+v, want False", c)
	}
	if _, ok := wasmPlugin(t, eng); ok {
		t.Error("a WasmPlugin was deployed for unsupported rules")
	}

	// The same RuleSet behind the waf-proxy, which runs every rule, is fine:
	// the refusal is the WASM driver's.
	proxied := newEngine(ns, "proxied", "crs-like", "proxied-gw", wafv1alpha1.DriverWAFProxy)
	gateway(t, ns, "proxied-gw")
	svc(t, ns, "proxied-gw-istio", "proxied-gw", 80)
	create(t, proxied)
	waitFor(t, proxied, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)

	patch := client.MergeFrom(rs.DeepCopy())
	rs.Annotations = map[string]string{wafv1alpha1.AnnotationAllowUnsupportedRules: "true"}
	if err := env.Client.Patch(context.Background(), rs, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	if _, ok := wasmPlugin(t, eng); !ok {
		t.Error("no WasmPlugin once the RuleSet acknowledges its unsupported rules")
	}
}

// TestMeshTLSTrustsCacheCA: with --operator-name, an istio-wasm Engine gets
// a DestinationRule in its namespace that originates TLS from the Gateway's
// pods to the cache with a CA Envoy can use: credentialName names a Secret
// in the same namespace (the gateway's, where Istio resolves it) holding
// the cache's CA under cacert, sni is the cache's host. Istio's typed
// client and istioctl validate read it as written. When the cache's CA
// rotates, the Secret (and a waf-proxy Engine's CA ConfigMap) follows
// without the Engines changing.
func TestMeshTLSTrustsCacheCA(t *testing.T) {
	cluster(t)
	ns := namespace(t, "mesh-tls")
	ruleSet(t, ns, "guard", guardRules)
	gateway(t, ns, "edge")
	eng := newEngine(ns, "edge-waf", "guard", "edge", wafv1alpha1.DriverIstioWASM)
	create(t, eng)
	waitFor(t, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	// A waf-proxy Engine beside it: nothing else brings it back before the
	// resync interval (no token to renew), so its CA ConfigMap following
	// the rotation shows the CA change itself re-applies Engines.
	gateway(t, ns, "proxied")
	svc(t, ns, "proxied-istio", "proxied", 80)
	proxied := newEngine(ns, "proxied-waf", "guard", "proxied", wafv1alpha1.DriverWAFProxy)
	create(t, proxied)
	waitFor(t, proxied, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)

	ic, err := istioclient.NewForConfig(shared.Cluster(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	dr, err := ic.NetworkingV1().DestinationRules(ns).Get(context.Background(), engine.ChildName(eng.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read the DestinationRule with Istio's client: %v", err)
	}
	host := fmt.Sprintf("%s.%s.svc.cluster.local", waf.DefaultCacheService, waftest.Namespace)
	tls := dr.Spec.GetTrafficPolicy().GetTls()
	if dr.Spec.GetHost() != host || tls.GetMode().String() != "SIMPLE" || tls.GetSni() != host ||
		tls.GetCredentialName() != engine.CASecretName(eng.Name) || tls.GetInsecureSkipVerify().GetValue() {
		t.Errorf("DestinationRule %s: want host and sni %s, SIMPLE TLS verified with credential %s", dr.Spec.String(), host, engine.CASecretName(eng.Name))
	}
	if sel := dr.Spec.GetWorkloadSelector().GetMatchLabels(); !maps.Equal(sel, map[string]string{wafv1alpha1.GatewayNameLabel: "edge"}) {
		t.Errorf("DestinationRule workloadSelector %v, want the Gateway's pods", sel)
	}
	if refs := dr.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != eng.UID {
		t.Errorf("DestinationRule owner references %+v, want the Engine", refs)
	}
	validateWithIstioctl(t, engine.DestinationRuleGVK, ns, dr.Name)

	caOf := func() []byte {
		var sec corev1.Secret
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: engine.CASecretName(eng.Name)}, &sec); err != nil {
			t.Fatalf("CA Secret: %v", err)
		}
		if refs := sec.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != eng.UID {
			t.Errorf("CA Secret owner references %+v, want the Engine", refs)
		}
		return sec.Data["cacert"]
	}
	before := env.Layer.Certs.CABundle()
	if got := caOf(); !bytes.Equal(got, before) || len(got) == 0 {
		t.Fatalf("the CA Secret's cacert is not the cache's CA")
	}

	// A forced rotation: the cache's certificate Secret is reissued under
	// a new CA, which joins the bundle.
	cert := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: waftest.Namespace, Name: waf.DefaultCacheCertSecret}}
	if err := env.Client.Delete(context.Background(), cert); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cache's CA bundle changed", func() bool { return !bytes.Equal(env.Layer.Certs.CABundle(), before) })
	eventually(t, "the CA Secret followed the rotation", func() bool {
		return bytes.Equal(caOf(), env.Layer.Certs.CABundle())
	})
	eventually(t, "the waf-proxy's CA ConfigMap followed the rotation", func() bool {
		var cm corev1.ConfigMap
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: engine.CAConfigMapName(proxied.Name)}, &cm); err != nil {
			t.Fatalf("CA ConfigMap: %v", err)
		}
		return cm.Data["ca.crt"] == string(env.Layer.Certs.CABundle())
	})

	deleteEngine(t, eng)
	if _, ok := object(t, engine.DestinationRuleGVK, ns, dr.Name); ok {
		t.Error("the DestinationRule outlived its Engine")
	}
	if _, ok := object(t, corev1.SchemeGroupVersion.WithKind("Secret"), ns, engine.CASecretName(eng.Name)); ok {
		t.Error("the CA Secret outlived its Engine")
	}
}

// validateWithIstioctl runs bin/istioctl validate on the object as stored.
func validateWithIstioctl(t *testing.T, gvk schema.GroupVersionKind, ns, name string) {
	t.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin", "istioctl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run make tools (or make bin/istioctl): %v", bin, err)
	}
	u, ok := object(t, gvk, ns, name)
	if !ok {
		t.Fatalf("%s %s/%s not found", gvk.Kind, ns, name)
	}
	for _, f := range []string{"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "ownerReferences"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	data, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), bin, "validate", "-f", file).CombinedOutput(); err != nil {
		t.Errorf("istioctl validate refused %s %s/%s: %v\n%s\n%s", gvk.Kind, ns, name, err, out, data)
	}
}
