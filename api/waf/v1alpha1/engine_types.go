package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GatewayNameLabel is the label Gateway API implementations put on the pods
// (and Services) they deploy for a Gateway (GEP-1762). An Engine selects its
// target's pods with it.
const GatewayNameLabel = "gateway.networking.k8s.io/gateway-name"

// FailurePolicy says what a data plane does while it has no rule set to
// enforce (it has not loaded one yet, or the cache is unreachable at start).
// +kubebuilder:validation:Enum=fail;allow
type FailurePolicy string

const (
	// FailurePolicyFail refuses traffic while no rule set is loaded.
	FailurePolicyFail FailurePolicy = "fail"
	// FailurePolicyAllow lets traffic through uninspected while no rule set
	// is loaded.
	FailurePolicyAllow FailurePolicy = "allow"
)

// DriverType names the data plane an Engine deploys.
// +kubebuilder:validation:Enum=istio-wasm;waf-proxy
type DriverType string

const (
	// DriverIstioWASM attaches the Coraza WASM plugin to the target
	// Gateway's Envoy pods with an Istio WasmPlugin.
	DriverIstioWASM DriverType = "istio-wasm"
	// DriverWAFProxy deploys `portal waf-proxy` in front of the target
	// Gateway's Service: no Istio needed.
	DriverWAFProxy DriverType = "waf-proxy"
)

// TargetType is the kind of workload an Engine protects.
// +kubebuilder:validation:Enum=Gateway
type TargetType string

// TargetTypeGateway is a Gateway API Gateway.
const TargetTypeGateway TargetType = "Gateway"

// EngineRuleSetReference names a RuleSet in the Engine's namespace.
type EngineRuleSetReference struct {
	// Name of the RuleSet. It must be in the Engine's namespace: an Engine
	// cannot enforce (or read) another namespace's rules.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// EngineTarget names the Gateway an Engine protects.
type EngineTarget struct {
	// Type of the target; only Gateway.
	// +optional
	// +kubebuilder:default=Gateway
	Type TargetType `json:"type,omitempty"`

	// Name of the Gateway (gateway.networking.k8s.io) in the Engine's
	// namespace. Its pods are those labelled
	// gateway.networking.k8s.io/gateway-name=<name>.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// RuleSetCacheServerConfig configures how the data plane reads the rule set
// cache.
type RuleSetCacheServerConfig struct {
	// PollIntervalSeconds is how often the data plane asks the cache for a
	// newer revision.
	// +optional
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	PollIntervalSeconds int32 `json:"pollIntervalSeconds,omitempty"`
}

// WasmDriverConfig configures the istio-wasm driver.
type WasmDriverConfig struct {
	// Image is the OCI reference of the Coraza WASM plugin; empty uses
	// Portal's --waf-wasm-image. Another image must start with one of
	// Portal's --waf-engine-allowed-images (reason ImageNotAllowed).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.matches('^oci://')",message="image must start with oci://"
	Image string `json:"image,omitempty"`

	// ImagePullSecret is a Secret in the Engine's namespace with the
	// registry credentials to pull Image.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ImagePullSecret string `json:"imagePullSecret,omitempty"`
}

// WAFProxyDriverConfig configures the waf-proxy driver.
type WAFProxyDriverConfig struct {
	// Image is the container image holding the portal binary; empty uses
	// Portal's --waf-proxy-image. Another image must start with one of
	// Portal's --waf-engine-allowed-images (reason ImageNotAllowed).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Image string `json:"image,omitempty"`

	// Replicas of the waf-proxy Deployment. With two or more, a
	// PodDisruptionBudget keeps all but one running during voluntary
	// disruptions.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Replicas int32 `json:"replicas,omitempty"`

	// UpstreamPort is the port of the Gateway's Service the proxy forwards
	// to; 0 takes the Service's first port.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	UpstreamPort int32 `json:"upstreamPort,omitempty"`

	// Port is the port of the waf-proxy Service that clients (a
	// LoadBalancer, an Ingress) send traffic to instead of the Gateway's
	// Service.
	// +optional
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// DriverConfig selects and configures the data plane.
// +kubebuilder:validation:XValidation:rule="self.type == 'istio-wasm' || !has(self.wasm)",message="wasm is only for type istio-wasm"
// +kubebuilder:validation:XValidation:rule="self.type == 'waf-proxy' || !has(self.wafProxy)",message="wafProxy is only for type waf-proxy"
type DriverConfig struct {
	// Type of data plane: istio-wasm (the Coraza WASM plugin in the
	// Gateway's Envoy, through an Istio WasmPlugin) or waf-proxy (a
	// `portal waf-proxy` Deployment in front of the Gateway's Service,
	// which also applies the WAFGatewayBindingPolicies of the Gateway and
	// its routes, the RuleSet guarding what no policy covers).
	// +optional
	// +kubebuilder:default=istio-wasm
	Type DriverType `json:"type,omitempty"`

	// Wasm configures the istio-wasm driver.
	// +optional
	Wasm *WasmDriverConfig `json:"wasm,omitempty"`

	// WAFProxy configures the waf-proxy driver.
	// +optional
	WAFProxy *WAFProxyDriverConfig `json:"wafProxy,omitempty"`
}

// EngineSpec attaches a RuleSet to a Gateway.
type EngineSpec struct {
	// RuleSet is the rule set the data plane enforces.
	RuleSet EngineRuleSetReference `json:"ruleSet"`

	// Target is the Gateway whose traffic the data plane inspects. One
	// Engine per Gateway: when several name the same Gateway, the oldest
	// wins and the others are Accepted=False (TargetConflict).
	Target EngineTarget `json:"target"`

	// FailurePolicy says what the data plane does while it has no rule set
	// loaded: fail (refuse traffic, the default) or allow.
	// +optional
	// +kubebuilder:default=fail
	FailurePolicy FailurePolicy `json:"failurePolicy,omitempty"`

	// RuleSetCacheServer configures how the data plane polls Portal's rule
	// set cache.
	// +optional
	RuleSetCacheServer *RuleSetCacheServerConfig `json:"ruleSetCacheServer,omitempty"`

	// Driver selects the data plane; istio-wasm when omitted.
	// +optional
	Driver DriverConfig `json:"driver,omitempty"`
}

// MatchedGateway is a Gateway an Engine is attached to.
type MatchedGateway struct {
	// Name of the Gateway.
	Name string `json:"name"`
}

// EngineStatus is what Portal made of an Engine.
type EngineStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Accepted says whether the Engine may attach to its target
	// (reasons Accepted, TargetNotFound, TargetConflict); Ready is True
	// when the data plane's objects are in place and the RuleSet has a
	// revision to serve; Degraded says what is wrong (RuleSetNotFound,
	// RuleSetDegraded, UnsupportedRules, ProvisioningFailed, ...).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// MatchedGateways are the Gateways the data plane is attached to.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	MatchedGateways []MatchedGateway `json:"matchedGateways,omitempty"`

	// RuleSetRevision is the RuleSet's cached revision when the Engine was
	// last reconciled: what the data plane loads on its next poll.
	// +optional
	RuleSetRevision string `json:"ruleSetRevision,omitempty"`

	// TokenExpiresAt is when the cache token Portal gave the data plane
	// expires (istio-wasm); Portal renews it before then.
	// +optional
	TokenExpiresAt *metav1.Time `json:"tokenExpiresAt,omitempty"`
}

// Condition types of an Engine (besides Ready and Degraded).
const (
	ConditionAccepted = "Accepted"
)

// Condition reasons of an Engine.
const (
	// ReasonAccepted: the target exists and no older Engine claims it.
	ReasonAccepted = "Accepted"
	// ReasonTargetNotFound: the Gateway in spec.target does not exist in
	// the Engine's namespace. Portal removes the data plane it deployed.
	ReasonTargetNotFound = "TargetNotFound"
	// ReasonTargetConflict: an older Engine (ties broken by name) targets
	// the same Gateway; this one deploys nothing.
	ReasonTargetConflict = "TargetConflict"
	// ReasonProvisioned: the data plane's objects are applied (Ready=True).
	ReasonProvisioned = "Provisioned"
	// ReasonNotAccepted: Ready=False because Accepted is False.
	ReasonNotAccepted = "NotAccepted"
	// ReasonRuleSetNotFound: spec.ruleSet names no RuleSet in the Engine's
	// namespace.
	ReasonRuleSetNotFound = "RuleSetNotFound"
	// ReasonRuleSetNotReady: the RuleSet has no compiled revision yet.
	ReasonRuleSetNotReady = "RuleSetNotReady"
	// ReasonRuleSetDegraded: the RuleSet's current inputs are not served
	// (its last good revision is) or it is Degraded for another reason.
	ReasonRuleSetDegraded = "RuleSetDegraded"
	// ReasonProvisioningFailed: Portal could not write the data plane's
	// objects (the message says which and why).
	ReasonProvisioningFailed = "ProvisioningFailed"
	// ReasonImageNotAllowed: spec.driver.wasm.image or
	// spec.driver.wafProxy.image names an image Portal is not allowed to
	// deploy (--waf-engine-allowed-images). Without the check, anyone who
	// may create an Engine could run any image through Portal.
	ReasonImageNotAllowed = "ImageNotAllowed"
	// ReasonTargetServiceNotFound: waf-proxy only: no Service labelled
	// gateway.networking.k8s.io/gateway-name=<target> to proxy to.
	ReasonTargetServiceNotFound = "TargetServiceNotFound"
)

// ReasonUnsupportedRules (declared with the RuleSet reasons) on an Engine:
// the istio-wasm driver refuses a RuleSet whose cached revision holds rules
// the WASM build cannot run, unless the RuleSet acknowledges them with the
// waf.portal.io/allow-unsupported-rules annotation.

// Engine attaches a RuleSet to a Gateway by deploying a data plane that
// polls Portal's rule set cache: the Coraza WASM plugin in the Gateway's
// Envoy (istio-wasm) or a `portal waf-proxy` in front of it (waf-proxy).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=weng,categories={portal,waf}
// +kubebuilder:printcolumn:name="RuleSet",type=string,JSONPath=`.spec.ruleSet.name`
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.spec.target.name`
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driver.type`
// +kubebuilder:printcolumn:name="Failure Policy",type=string,JSONPath=`.spec.failurePolicy`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Engine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EngineSpec   `json:"spec"`
	Status EngineStatus `json:"status,omitempty"`
}

// EngineList is a list of Engines.
// +kubebuilder:object:root=true
type EngineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Engine `json:"items"`
}
