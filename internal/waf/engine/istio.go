package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/driver"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

func init() { driver.Register(istioWASM{}) }

// istioWASM is the istio-wasm driver: the Coraza WASM plugin, attached to
// the target Gateway's Envoy pods with an Istio WasmPlugin, reading the
// Engine's RuleSet from the cache with a token Portal mints.
type istioWASM struct{}

func (istioWASM) Name() wafv1alpha1.DriverType { return wafv1alpha1.DriverIstioWASM }

// Owned: the WasmPlugin and, with --operator-name, the DestinationRule and
// CA Secret. Only with --operator-name does Portal write those, and only
// then does the chart grant it Secrets and DestinationRules: deleting them
// without that is forbidden, and every waf-proxy Engine's reconcile and
// finalizer would fail on it. (Left over from an earlier --operator-name,
// they are the Engine's: its owner reference lets the garbage collector
// take them.)
func (istioWASM) Owned(s driver.Settings, eng *wafv1alpha1.Engine) []driver.Object {
	name := ChildName(eng.Name)
	out := []driver.Object{{GVK: WasmPluginGVK, Namespace: eng.Namespace, Name: name}}
	if s.OperatorName != "" {
		out = append(out, driver.Object{GVK: DestinationRuleGVK, Namespace: eng.Namespace, Name: name},
			driver.Object{GVK: corev1.SchemeGroupVersion.WithKind("Secret"), Namespace: eng.Namespace, Name: CASecretName(eng.Name)})
	}
	return out
}

// The keys of the Coraza WASM plugin's pluginConfig that Portal sets: those
// the Coraza Kubernetes Operator's plugin reads, so the same plugin build
// works with Portal's cache.
const (
	// PluginCacheServerInstance is the rule set to fetch: namespace/name.
	PluginCacheServerInstance = "cache_server_instance"
	// PluginCacheServerCluster is the Envoy cluster of the cache server.
	PluginCacheServerCluster = "cache_server_cluster"
	// PluginCacheToken is the bearer token the plugin sends the cache.
	PluginCacheToken = "cache_token"
	// PluginReloadInterval is the poll interval in seconds.
	PluginReloadInterval = "rule_reload_interval_seconds"
	// PluginFailurePolicy is fail or allow.
	PluginFailurePolicy = "failure_policy"
	// PluginEngine and PluginNamespace label the plugin's logs.
	PluginEngine    = "engine"
	PluginNamespace = "namespace"
)

// cacheFQDN is the cache Service's name inside the cluster.
func cacheFQDN(s driver.Settings) string {
	return fmt.Sprintf("%s.%s.svc.cluster.local", s.CacheService, s.Namespace)
}

// cacheCluster is the Envoy cluster Istio makes for the cache Service: the
// plugin calls the cache through it.
func cacheCluster(s driver.Settings) string {
	return fmt.Sprintf("outbound|%d||%s", s.CachePort, cacheFQDN(s))
}

func pollSeconds(eng *wafv1alpha1.Engine) int64 {
	if c := eng.Spec.RuleSetCacheServer; c != nil && c.PollIntervalSeconds > 0 {
		return int64(c.PollIntervalSeconds)
	}
	return int64(DefaultPollInterval / time.Second)
}

func failurePolicy(eng *wafv1alpha1.Engine) string {
	if eng.Spec.FailurePolicy == "" {
		return string(wafv1alpha1.FailurePolicyFail)
	}
	return string(eng.Spec.FailurePolicy)
}

// Provision applies the istio-wasm data plane: the NetworkPolicy to the
// cache first (so the plugin never runs without it), the ServiceAccount
// and its token, the mesh entries for the cache, then the WasmPlugin.
func (istioWASM) Provision(ctx context.Context, h driver.Host, eng *wafv1alpha1.Engine) (driver.Result, error) {
	s := h.Settings()
	def := s.Images[wafv1alpha1.DriverIstioWASM]
	image := def
	pullSecret := ""
	if w := eng.Spec.Driver.Wasm; w != nil {
		if err := checkImage(s, w.Image, def, "spec.driver.wasm.image"); err != nil {
			return driver.Result{}, err
		}
		if w.Image != "" {
			image = w.Image
		}
		pullSecret = w.ImagePullSecret
	}
	if image == "" {
		return driver.Result{}, &noImage{what: "Coraza WASM plugin", field: "spec.driver.wasm.image", flag: "--waf-wasm-image"}
	}
	if err := h.AllowCache(ctx, eng, map[string]string{wafv1alpha1.GatewayNameLabel: eng.Spec.Target.Name}); err != nil {
		return driver.Result{}, err
	}
	sa, err := h.ServiceAccount(ctx, eng)
	if err != nil {
		return driver.Result{}, err
	}
	tok, err := h.Token(ctx, eng, sa, TokenAudience(eng))
	if err != nil {
		return driver.Result{}, err
	}
	if s.OperatorName != "" {
		if err := applyMeshEntries(ctx, h, eng); err != nil {
			return driver.Result{}, err
		}
	}
	spec := map[string]any{
		"url": image,
		"selector": map[string]any{
			"matchLabels": map[string]any{wafv1alpha1.GatewayNameLabel: eng.Spec.Target.Name},
		},
		"pluginConfig": map[string]any{
			PluginCacheServerInstance: eng.Namespace + "/" + eng.Spec.RuleSet.Name,
			PluginCacheServerCluster:  cacheCluster(s),
			PluginCacheToken:          tok.Value,
			PluginReloadInterval:      pollSeconds(eng),
			PluginFailurePolicy:       failurePolicy(eng),
			PluginEngine:              eng.Name,
			PluginNamespace:           eng.Namespace,
		},
	}
	if pullSecret != "" {
		spec["imagePullSecret"] = pullSecret
	}
	wp := newUnstructured(WasmPluginGVK, map[string]any{
		"name": ChildName(eng.Name), "namespace": eng.Namespace,
		"labels": toAny(labels(eng)),
		"ownerReferences": []any{map[string]any{
			"apiVersion": wafv1alpha1.GroupVersion.String(), "kind": "Engine", "name": eng.Name, "uid": string(eng.UID),
			"controller": true, "blockOwnerDeletion": true,
		}},
	})
	wp.Object["spec"] = spec
	if err := h.Apply(ctx, wp); err != nil {
		return driver.Result{}, err
	}
	return driver.Result{
		Message:     fmt.Sprintf("WasmPlugin %s attaches RuleSet %s to the pods of Gateway %s", wp.GetName(), eng.Spec.RuleSet.Name, eng.Spec.Target.Name),
		Requeue:     tok.RenewAt.Sub(h.Clock().Now()),
		TokenExpiry: metaTime(tok.Expires),
	}, nil
}

// applyMeshEntries makes the cache known to the mesh and lets the
// Gateway's Envoy trust it. The ServiceEntry for the cache's Service, in
// Portal's namespace, is shared by every Engine. TLS origination is the
// Engine's own: Envoy resolves a DestinationRule's credentialName in the
// namespace of the proxy that uses it, so the cache's CA is published into
// a Secret in the Engine's namespace (the Gateway's) and a DestinationRule
// there, selecting the Gateway's pods, verifies the cache against it.
func applyMeshEntries(ctx context.Context, h driver.Host, eng *wafv1alpha1.Engine) error {
	s := h.Settings()
	ca := s.CABundle()
	if len(ca) == 0 {
		return errors.New("the cache's CA is not issued yet")
	}
	host := cacheFQDN(s)
	se := newUnstructured(ServiceEntryGVK, map[string]any{
		"name": s.OperatorName + "-waf-cache", "namespace": s.Namespace, "labels": map[string]any{
			LabelManagedBy: FieldOwner, LabelPartOf: s.OperatorName,
		},
	})
	se.Object["spec"] = map[string]any{
		"hosts":      []any{host},
		"location":   "MESH_INTERNAL",
		"resolution": "DNS",
		"ports":      []any{map[string]any{"number": int64(s.CachePort), "name": "tls-waf-cache", "protocol": "TLS"}},
		"endpoints":  []any{map[string]any{"address": host}},
	}
	if err := h.Apply(ctx, se); err != nil {
		return err
	}
	// The Secret first: a DestinationRule naming a missing credential
	// leaves Envoy without the cluster.
	if err := h.Apply(ctx, caSecret(eng, ca)); err != nil {
		return err
	}
	return h.Apply(ctx, destinationRule(s, eng))
}

// caSecret holds the cache's CA under the key Istio reads a DestinationRule
// credential's CA from.
func caSecret(eng *wafv1alpha1.Engine, ca []byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name: CASecretName(eng.Name), Namespace: eng.Namespace, Labels: labels(eng),
			OwnerReferences: []metav1.OwnerReference{ownerRef(eng)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{CASecretKey: ca},
	}
}

// destinationRule originates TLS from the Gateway's pods to the cache,
// verifying its certificate against the CA Secret.
func destinationRule(s driver.Settings, eng *wafv1alpha1.Engine) *unstructured.Unstructured {
	host := cacheFQDN(s)
	dr := newUnstructured(DestinationRuleGVK, map[string]any{
		"name": ChildName(eng.Name), "namespace": eng.Namespace, "labels": toAny(labels(eng)),
		"ownerReferences": []any{map[string]any{
			"apiVersion": wafv1alpha1.GroupVersion.String(), "kind": "Engine", "name": eng.Name, "uid": string(eng.UID),
			"controller": true, "blockOwnerDeletion": true,
		}},
	})
	dr.Object["spec"] = map[string]any{
		"host":             host,
		"exportTo":         []any{"."},
		"workloadSelector": map[string]any{"matchLabels": map[string]any{wafv1alpha1.GatewayNameLabel: eng.Spec.Target.Name}},
		"trafficPolicy": map[string]any{
			"tls": map[string]any{"mode": "SIMPLE", "credentialName": CASecretName(eng.Name), "sni": host},
		},
	}
	return dr
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Limits: what the Istio WASM build of Coraza cannot run, built afresh on
// each call so no caller can change the driver's list. Sources:
//
//   - Operators: Coraza v3.8.1 built with TinyGo (the Istio WASM plugin)
//     registers @inspectFile, @rbl and @validateSchema as @unconditionalMatch
//     (internal/operators/*_tinygo.go): a rule using one matches every
//     request, so a blocking rule blocks all traffic.
//   - Rule ids: the Coraza Kubernetes Operator's list of OWASP CRS rules that
//     fail in its Istio WASM mode (internal/rulesets/unsupported.go there,
//     from its LIMITATIONS.md and CRS regression runs). "incompatible" rules
//     do not work in WASM mode; "redundant" rules work, but Envoy rejects or
//     rewrites part of what they look for before the WAF sees it.
func (istioWASM) Limits() ruleset.Limits {
	return ruleset.Limits{
		Runtime: "the Istio WASM build of Coraza",
		Operators: map[string]string{
			"inspectFile":    unconditional,
			"rbl":            unconditional,
			"validateSchema": unconditional,
		},
		Rules: istioWASMRules(),
	}
}

const unconditional = "the TinyGo build of Coraza runs it as @unconditionalMatch: the rule matches every request"

func istioWASMRules() map[int]string {
	r := map[int]string{
		// incompatible: does not work in WASM mode.
		920171: "incompatible: a GET or HEAD request with a body is not detected",
		920274: "incompatible: Envoy's :path pseudo-header triggers false positives (paranoia level 4)",
		920430: "incompatible: an invalid HTTP protocol version is not detected",
		922110: "incompatible: multipart charset detection does not work behind Envoy",
		932300: "incompatible: fails with multiphase evaluation",
		933120: "incompatible: fails with multiphase evaluation",
		934120: "incompatible: enclosed alphanumerics are not detected over HTTP/2",
		941310: "incompatible: raw non-ASCII body bytes and XML attribute values are not inspected",
	}
	for id, why := range map[int]string{
		920270: "blocked at a different layer",
		921140: "blocked at a different layer",
		921250: "cookie $Version is not detected",
		922130: "multipart header regex behaves differently",
		932200: "an earlier rule matches instead",
		941210: "HTML entity decoding differs",
		944200: "Java deserialization pattern is not detected",
		959100: "the blocking evaluation does not re-run",
		980170: "the correlation does not re-run",
	} {
		r[id] = "incompatible (cause under investigation): " + why
	}
	for _, id := range []int{911100, 920100, 949110} {
		r[id] = "redundant: Envoy rejects some invalid methods and request lines with 400 before the WAF"
	}
	for _, id := range []int{920181, 920210} {
		r[id] = "redundant: Envoy enforces part of the protocol before the WAF"
	}
	for _, id := range []int{920280, 920290, 920300, 920310, 920311, 920320, 920330, 920610} {
		r[id] = "redundant: Envoy normalizes missing or empty headers over HTTP/2"
	}
	for _, id := range []int{932161, 932207, 932237, 932239, 932390, 941101, 941110, 941120, 942280} {
		r[id] = "redundant: Envoy sanitizes some malicious header values before the WAF"
	}
	return r
}
