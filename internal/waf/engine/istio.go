package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

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
		if err := r.applyMeshEntries(ctx); err != nil {
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

// applyMeshEntries makes the cache known to the mesh: a ServiceEntry for
// its Service and a DestinationRule that originates TLS to it, since the
// cache serves TLS itself. Both are shared by every Engine.
func (r *Reconciler) applyMeshEntries(ctx context.Context) error {
	name := r.opts.OperatorName + "-waf-cache"
	host := r.cacheFQDN()
	md := func() map[string]any {
		return map[string]any{"name": name, "namespace": r.opts.Namespace, "labels": map[string]any{
			LabelManagedBy: FieldOwner, "app.kubernetes.io/part-of": r.opts.OperatorName,
		}}
	}
	se := newUnstructured(ServiceEntryGVK, md())
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
	dr := newUnstructured(DestinationRuleGVK, md())
	dr.Object["spec"] = map[string]any{
		"host": host,
		"trafficPolicy": map[string]any{
			"tls": map[string]any{"mode": "SIMPLE", "sni": host},
		},
	}
	return r.applyUnstructured(ctx, dr)
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
