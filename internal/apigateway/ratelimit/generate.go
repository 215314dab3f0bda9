// Package ratelimit turns a RateLimit into an Istio EnvoyFilter that runs
// Envoy's local_ratelimit filter in the selected workload's proxy: its
// inbound sidecar listener, or the gateway's listeners for an ingress
// gateway.
package ratelimit

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
)

const (
	// LabelRateLimit names the RateLimit an EnvoyFilter was generated for.
	LabelRateLimit = "gateway.portal.io/ratelimit"
	// LabelManagedBy marks every object Portal generates.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "portal"

	// FilterName is Envoy's local rate limit HTTP filter.
	FilterName = "envoy.filters.http.local_ratelimit"
	filterType = "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"
	hcmName    = "envoy.filters.network.http_connection_manager"
)

// Context says which of the workload's listeners are limited.
type Context int

const (
	// Sidecar limits a pod's inbound requests in its Istio sidecar.
	Sidecar Context = iota
	// Gateway limits the requests an ingress gateway receives.
	Gateway
)

// Name is the EnvoyFilter's name for a RateLimit.
func Name(rl *gatewayv1alpha1.RateLimit) string {
	n := rl.Name
	if len(n) > 243 {
		n = n[:243]
	}
	return n + "-ratelimit"
}

// ValidateBuckets checks what the schema cannot: Envoy takes a bucket's
// fill interval only as a multiple of the default bucket's, and every
// bucket must be told apart from the others.
func ValidateBuckets(rl *gatewayv1alpha1.RateLimit) error {
	def := rl.Spec.Local.DefaultBucket.FillInterval.Duration
	if def < 50*time.Millisecond {
		return fmt.Errorf("local.defaultBucket.fillInterval must be at least 50ms")
	}
	seen := map[string]int{}
	for i, b := range rl.Spec.Local.Buckets {
		fi := b.Bucket.FillInterval.Duration
		if fi < 50*time.Millisecond {
			return fmt.Errorf("local.buckets[%d].bucket.fillInterval must be at least 50ms", i)
		}
		if fi%def != 0 {
			return fmt.Errorf("local.buckets[%d].bucket.fillInterval %s must be a multiple of local.defaultBucket.fillInterval %s (Envoy's local rate limit refuses it otherwise)", i, fi, def)
		}
		k := fmt.Sprint(entries(b))
		if j, dup := seen[k]; dup {
			return fmt.Errorf("local.buckets[%d] selects the same requests as local.buckets[%d]; merge them", i, j)
		}
		seen[k] = i
	}
	return nil
}

// entry is one descriptor entry: a request header (or `:path`) and the
// value it must have.
type entry struct{ header, key, value string }

// entries are a bucket's descriptor entries, headers in name order then
// the path, so the same bucket always yields the same descriptor.
func entries(b gatewayv1alpha1.BucketConfig) []entry {
	var out []entry
	for _, h := range slices.Sorted(maps.Keys(b.Headers)) {
		name := strings.ToLower(h)
		out = append(out, entry{header: name, key: name, value: b.Headers[h]})
	}
	if b.Path != "" {
		out = append(out, entry{header: ":path", key: "path", value: b.Path})
	}
	return out
}

// Generate builds the EnvoyFilter of rl for a workload of the given kind.
func Generate(rl *gatewayv1alpha1.RateLimit, ctx Context) (*networkingv1alpha3.EnvoyFilter, error) {
	ef := &networkingv1alpha3.EnvoyFilter{ObjectMeta: metav1.ObjectMeta{
		Name: Name(rl), Namespace: rl.Namespace,
		Labels: map[string]string{LabelRateLimit: rl.Name, LabelManagedBy: managedBy},
	}}
	ef.APIVersion, ef.Kind = networkingv1alpha3.SchemeGroupVersion.String(), "EnvoyFilter"
	ef.Spec.WorkloadSelector = &networkingapi.WorkloadSelector{Labels: maps.Clone(rl.Spec.SelectorLabels)}
	pc := networkingapi.EnvoyFilter_SIDECAR_INBOUND
	if ctx == Gateway {
		pc = networkingapi.EnvoyFilter_GATEWAY
	}
	route, err := routePatch(rl)
	if err != nil {
		return nil, err
	}
	filter, err := structpb.NewStruct(map[string]any{
		"name": FilterName,
		"typed_config": map[string]any{
			"@type":       filterType,
			"stat_prefix": "http_local_rate_limiter",
		},
	})
	if err != nil {
		return nil, err
	}
	ef.Spec.ConfigPatches = []*networkingapi.EnvoyFilter_EnvoyConfigObjectPatch{
		{
			ApplyTo: networkingapi.EnvoyFilter_HTTP_FILTER,
			Match: &networkingapi.EnvoyFilter_EnvoyConfigObjectMatch{
				Context: pc,
				ObjectTypes: &networkingapi.EnvoyFilter_EnvoyConfigObjectMatch_Listener{Listener: &networkingapi.EnvoyFilter_ListenerMatch{
					FilterChain: &networkingapi.EnvoyFilter_ListenerMatch_FilterChainMatch{
						Filter: &networkingapi.EnvoyFilter_ListenerMatch_FilterMatch{Name: hcmName},
					},
				}},
			},
			Patch: &networkingapi.EnvoyFilter_Patch{Operation: networkingapi.EnvoyFilter_Patch_INSERT_FIRST, Value: filter},
		},
		{
			ApplyTo: networkingapi.EnvoyFilter_HTTP_ROUTE,
			Match:   &networkingapi.EnvoyFilter_EnvoyConfigObjectMatch{Context: pc},
			Patch:   &networkingapi.EnvoyFilter_Patch{Operation: networkingapi.EnvoyFilter_Patch_MERGE, Value: route},
		},
	}
	return ef, nil
}

func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

func bucket(b gatewayv1alpha1.BucketSpec) map[string]any {
	return map[string]any{
		"max_tokens":      float64(b.MaxTokens),
		"tokens_per_fill": float64(b.TokensPerFill),
		"fill_interval":   seconds(b.FillInterval.Duration),
	}
}

func percent(n float64) map[string]any {
	return map[string]any{"numerator": n, "denominator": "HUNDRED"}
}

// routePatch is the per-route configuration: the default bucket, one
// descriptor per bucket and the rate limit actions that produce them. Each
// bucket has its own action list, so a request produces a bucket's
// descriptor whenever it carries that bucket's headers, whatever other
// buckets ask for. With only a default bucket there are no actions and no
// descriptors at all, not empty lists as Kyma's generator writes them
// (kyma-project/api-gateway#2380 reports default-only RateLimits that Envoy
// does not take).
func routePatch(rl *gatewayv1alpha1.RateLimit) (*structpb.Struct, error) {
	enforced := 100.0
	if rl.Spec.Enforce != nil && !*rl.Spec.Enforce {
		enforced = 0
	}
	headers := "OFF"
	if rl.Spec.EnableResponseHeaders {
		headers = "DRAFT_VERSION_03"
	}
	cfg := map[string]any{
		"@type":                               filterType,
		"stat_prefix":                         "rate_limit",
		"enable_x_ratelimit_headers":          headers,
		"filter_enabled":                      map[string]any{"runtime_key": "local_rate_limit_enabled", "default_value": percent(100)},
		"filter_enforced":                     map[string]any{"runtime_key": "local_rate_limit_enforced", "default_value": percent(enforced)},
		"always_consume_default_token_bucket": false,
		"token_bucket":                        bucket(rl.Spec.Local.DefaultBucket),
	}
	value := map[string]any{"typed_per_filter_config": map[string]any{FilterName: cfg}}
	if len(rl.Spec.Local.Buckets) > 0 {
		var descriptors, limits []any
		for _, b := range rl.Spec.Local.Buckets {
			var es, actions []any
			for _, e := range entries(b) {
				es = append(es, map[string]any{"key": e.key, "value": e.value})
				actions = append(actions, map[string]any{"request_headers": map[string]any{"header_name": e.header, "descriptor_key": e.key}})
			}
			descriptors = append(descriptors, map[string]any{"entries": es, "token_bucket": bucket(b.Bucket)})
			limits = append(limits, map[string]any{"actions": actions})
		}
		cfg["descriptors"] = descriptors
		value["route"] = map[string]any{"rate_limits": limits}
	}
	s, err := structpb.NewStruct(value)
	if err != nil {
		return nil, fmt.Errorf("rate limit configuration: %w", err)
	}
	return s, nil
}
