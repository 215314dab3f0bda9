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
)

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
func (r *Reconciler) cacheFQDN() string {
	return fmt.Sprintf("%s.%s.svc.cluster.local", r.opts.CacheService, r.opts.Namespace)
}

// CacheCluster is the Envoy cluster Istio makes for the cache Service: the
// plugin calls the cache through it.
func (r *Reconciler) CacheCluster() string {
	return fmt.Sprintf("outbound|%d||%s", r.opts.CachePort, r.cacheFQDN())
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

// provisionWASM applies the istio-wasm data plane: the NetworkPolicy to the
// cache first (so the plugin never runs without it), the ServiceAccount
// and its token, the mesh entries for the cache, then the WasmPlugin.
func (r *Reconciler) provisionWASM(ctx context.Context, eng *wafv1alpha1.Engine) (provisioned, error) {
	image := r.opts.WASMImage
	pullSecret := ""
	if w := eng.Spec.Driver.Wasm; w != nil {
		if err := r.checkImage(w.Image, r.opts.WASMImage, "spec.driver.wasm.image"); err != nil {
			return provisioned{}, err
		}
		if w.Image != "" {
			image = w.Image
		}
		pullSecret = w.ImagePullSecret
	}
	if image == "" {
		return provisioned{}, errors.New("no Coraza WASM plugin image: set spec.driver.wasm.image or Portal's --waf-wasm-image")
	}
	if err := r.applyNetworkPolicy(ctx, eng, map[string]string{wafv1alpha1.GatewayNameLabel: eng.Spec.Target.Name}); err != nil {
		return provisioned{}, err
	}
	sa, err := r.applyServiceAccount(ctx, eng)
	if err != nil {
		return provisioned{}, err
	}
	tok, err := r.ensureToken(ctx, eng, sa)
	if err != nil {
		return provisioned{}, err
	}
	if r.opts.OperatorName != "" {
		if err := r.applyMeshEntries(ctx, eng); err != nil {
			return provisioned{}, err
		}
	}
	spec := map[string]any{
		"url": image,
		"selector": map[string]any{
			"matchLabels": map[string]any{wafv1alpha1.GatewayNameLabel: eng.Spec.Target.Name},
		},
		"pluginConfig": map[string]any{
			PluginCacheServerInstance: eng.Namespace + "/" + eng.Spec.RuleSet.Name,
			PluginCacheServerCluster:  r.CacheCluster(),
			PluginCacheToken:          tok.value,
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
	if err := r.applyUnstructured(ctx, wp); err != nil {
		return provisioned{}, err
	}
	if err := r.teardown(ctx, eng, proxyObjects); err != nil {
		return provisioned{}, err
	}
	return provisioned{
		message:     fmt.Sprintf("WasmPlugin %s attaches RuleSet %s to the pods of Gateway %s", wp.GetName(), eng.Spec.RuleSet.Name, eng.Spec.Target.Name),
		requeue:     time.Until(tok.renewAt),
		tokenExpiry: metaTime(tok.expires),
	}, nil
}

// applyMeshEntries makes the cache known to the mesh and lets the
// Gateway's Envoy trust it. The ServiceEntry for the cache's Service, in
// Portal's namespace, is shared by every Engine. TLS origination is the
// Engine's own: Envoy resolves a DestinationRule's credentialName in the
// namespace of the proxy that uses it, so the cache's CA is published into
// a Secret in the Engine's namespace (the Gateway's) and a DestinationRule
// there, selecting the Gateway's pods, verifies the cache against it.
func (r *Reconciler) applyMeshEntries(ctx context.Context, eng *wafv1alpha1.Engine) error {
	ca := r.opts.CABundle()
	if len(ca) == 0 {
		return errors.New("the cache's CA is not issued yet")
	}
	host := r.cacheFQDN()
	se := newUnstructured(ServiceEntryGVK, map[string]any{
		"name": r.opts.OperatorName + "-waf-cache", "namespace": r.opts.Namespace, "labels": map[string]any{
			LabelManagedBy: FieldOwner, LabelPartOf: r.opts.OperatorName,
		},
	})
	se.Object["spec"] = map[string]any{
		"hosts":      []any{host},
		"location":   "MESH_INTERNAL",
		"resolution": "DNS",
		"ports":      []any{map[string]any{"number": int64(r.opts.CachePort), "name": "tls-waf-cache", "protocol": "TLS"}},
		"endpoints":  []any{map[string]any{"address": host}},
	}
	if err := r.applyUnstructured(ctx, se); err != nil {
		return err
	}
	// The Secret first: a DestinationRule naming a missing credential
	// leaves Envoy without the cluster.
	if err := r.apply(ctx, caSecret(eng, ca)); err != nil {
		return err
	}
	return r.applyUnstructured(ctx, r.destinationRule(eng))
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
func (r *Reconciler) destinationRule(eng *wafv1alpha1.Engine) *unstructured.Unstructured {
	host := r.cacheFQDN()
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
