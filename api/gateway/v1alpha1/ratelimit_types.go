package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BucketSpec is a token bucket: a request takes a token and is refused with
// 429 when there is none; tokensPerFill tokens are added every fillInterval,
// up to maxTokens.
type BucketSpec struct {
	// MaxTokens the bucket holds; it starts full.
	// +kubebuilder:validation:Minimum=1
	MaxTokens int64 `json:"maxTokens"`
	// TokensPerFill are added every fillInterval.
	// +kubebuilder:validation:Minimum=1
	TokensPerFill int64 `json:"tokensPerFill"`
	// FillInterval is a duration such as `30s` or `1m`, at least 50ms (the
	// shortest Envoy's token bucket takes).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('50ms')",message="fillInterval must be at least 50ms"
	FillInterval metav1.Duration `json:"fillInterval"`
}

// BucketConfig is a token bucket for the requests of a path, or with some
// headers, or both.
// +kubebuilder:validation:XValidation:rule="has(self.path) || has(self.headers)",message="a bucket needs a path or headers to select its requests"
type BucketConfig struct {
	// Path of the requests, matched exactly.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	// +optional
	Path string `json:"path,omitempty"`
	// Headers the requests carry, with these exact values.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	Headers map[string]string `json:"headers,omitempty"`
	// Bucket for these requests.
	Bucket BucketSpec `json:"bucket"`
}

// LocalConfig is rate limiting done by each Envoy on its own (Envoy's
// local_ratelimit filter): every replica of the workload has its own buckets.
type LocalConfig struct {
	// DefaultBucket takes the requests no bucket of buckets selects.
	DefaultBucket BucketSpec `json:"defaultBucket"`
	// Buckets for some requests; the first that selects a request takes it.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Buckets []BucketConfig `json:"buckets,omitempty"`
}

// RateLimitSpec says which workload is rate-limited and how.
type RateLimitSpec struct {
	// SelectorLabels pick the workload in the RateLimit's namespace: pods
	// with an Istio sidecar (their inbound requests are limited) or an Istio
	// ingress gateway. A workload may be selected by one RateLimit only; the
	// controller reports the others in state Error.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	SelectorLabels map[string]string `json:"selectorLabels"`

	// Local configures local rate limiting.
	Local LocalConfig `json:"local"`

	// EnableResponseHeaders adds x-ratelimit-limit, x-ratelimit-remaining
	// and x-ratelimit-reset to responses.
	// +optional
	EnableResponseHeaders bool `json:"enableResponseHeaders,omitempty"`

	// Enforce refuses requests over the limit with 429. When false (shadow
	// mode) they pass and are only counted in Envoy's statistics. Unset
	// means true.
	// +kubebuilder:default=true
	// +optional
	Enforce *bool `json:"enforce,omitempty"`
}

// RateLimit limits the rate of requests a workload accepts, with token
// buckets that Portal configures in the workload's Envoy (an Istio
// EnvoyFilter).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=rl,categories={portal,gateway}
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Enforce",type=boolean,JSONPath=`.spec.enforce`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RateLimit struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RateLimitSpec `json:"spec"`
	// +optional
	Status Status `json:"status,omitempty"`
}

// RateLimitList is a list of RateLimits.
// +kubebuilder:object:root=true
type RateLimitList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RateLimit `json:"items"`
}
