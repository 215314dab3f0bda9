package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationAllowUnsupportedRules, set to "true" on a RuleSet, acknowledges
// rules that a data plane cannot run as written (see status.unsupportedRules):
// Portal then does not mark the RuleSet Degraded for them.
const AnnotationAllowUnsupportedRules = "waf.portal.io/allow-unsupported-rules"

// SourceReference names a RuleSource in the RuleSet's namespace.
type SourceReference struct {
	// Name of the RuleSource.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// DataReference names a RuleData in the RuleSet's namespace.
type DataReference struct {
	// Name of the RuleData.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// RuleSetSpec says which rules and data files make up the rule set.
type RuleSetSpec struct {
	// Sources are the RuleSources whose rules, concatenated in this order,
	// make up the rule set. Order matters in SecLang: a rule can only update
	// or remove rules defined before it. A RuleSource may be named once: the
	// API server rejects a list that names one twice, and Portal reports such
	// a RuleSet (stored before this rule) with reason DuplicateReference.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2048
	// +listType=map
	// +listMapKey=name
	Sources []SourceReference `json:"sources"`

	// Data are the RuleData whose files the rules may read. They are merged
	// in this order; a file name defined twice takes the content of the later
	// RuleData. A RuleData may be named once, as for sources.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	Data []DataReference `json:"data,omitempty"`

	// Overrides is what RuleSetOverrides on the routes this rule set
	// protects may change; none when absent.
	// +optional
	Overrides *OverridePermissions `json:"overrides,omitempty"`
}

// Revision identifies a compiled bundle in the rule set cache.
type Revision struct {
	// UUID is the revision's id in the cache, as `GET /rules/{namespace}/{name}/latest`
	// returns it. It is derived from SHA256, so every replica serves the same
	// content under the same id.
	UUID string `json:"uuid"`

	// Timestamp is when the revision entered the cache.
	Timestamp metav1.Time `json:"timestamp"`

	// SHA256 is the hex SHA-256 digest of the bundle the cache serves: the
	// concatenated rules and the data files (docs/concepts/waf.md gives the
	// encoding).
	SHA256 string `json:"sha256"`
}

// RuleError locates the rule that stopped the rule set from compiling.
type RuleError struct {
	// Source is the RuleSource holding the failing directive; empty when the
	// failure is not in one directive.
	// +optional
	Source string `json:"source,omitempty"`

	// Line is the 1-based line of the directive in that RuleSource.
	// +optional
	Line int32 `json:"line,omitempty"`

	// Message says what is wrong.
	Message string `json:"message"`
}

// UnsupportedRule is a rule that a data plane cannot run as written.
type UnsupportedRule struct {
	// Driver is the data plane: istio-wasm (Coraza built with TinyGo inside
	// Envoy).
	Driver string `json:"driver"`

	// RuleID is the rule's id; 0 for an operator found outside a rule id.
	// +optional
	RuleID int64 `json:"ruleID,omitempty"`

	// Operator is the operator that the driver cannot run, if that is the
	// cause.
	// +optional
	Operator string `json:"operator,omitempty"`

	// Reason says what goes wrong on that data plane.
	Reason string `json:"reason"`
}

// RuleSetStatus is what Portal made of the rule set.
type RuleSetStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready is True when the current inputs compiled and are
	// served from the cache; Progressing is True while a new generation is
	// being compiled; Degraded is True when the current inputs are not served
	// (a previous revision may still be) or contain rules a data plane cannot
	// run.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// CachedRevision is the revision the cache serves for this rule set: the
	// last one that compiled, which is older than the inputs when they fail.
	// +optional
	CachedRevision *Revision `json:"cachedRevision,omitempty"`

	// RuleCount is the number of rules (SecRule and SecAction, a chain
	// counting once) in the cached revision.
	// +optional
	RuleCount int32 `json:"ruleCount,omitempty"`

	// Error says why the current inputs were not cached; absent when they
	// were.
	// +optional
	Error *RuleError `json:"error,omitempty"`

	// UnsupportedRules lists rules of the cached revision that a data plane
	// cannot run as written (at most 128 are listed).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	UnsupportedRules []UnsupportedRule `json:"unsupportedRules,omitempty"`

	// Bundle says where the cached revision is published as a bundle in
	// S3-compatible storage, for data planes and other clusters that read
	// bundles (WAFGatewayBindingPolicy spec.bundle). Present only when Portal
	// publishes bundles (--bundle-publish-bucket).
	// +optional
	Bundle *BundleStatus `json:"bundle,omitempty"`
}

// BundleState is the publication state of a RuleSet's bundle.
// +kubebuilder:validation:Enum=pending;processing;ready;invalid
type BundleState string

// Publication states of a RuleSet's bundle (seed 001's values).
const (
	// BundleStatePending: nothing has compiled yet.
	BundleStatePending BundleState = "pending"
	// BundleStateProcessing: the cached revision is being uploaded, or its
	// upload failed and is retried (message says why).
	BundleStateProcessing BundleState = "processing"
	// BundleStateReady: the cached revision is at location.
	BundleStateReady BundleState = "ready"
	// BundleStateInvalid: the rule set has never compiled: there is nothing
	// to publish (the Ready condition says why).
	BundleStateInvalid BundleState = "invalid"
)

// BundleStatus is seed 001's status.bundle: where a compiled rule set lives
// in S3-compatible storage and the digest to verify it against.
type BundleStatus struct {
	// State is pending, processing, ready or invalid.
	State BundleState `json:"state"`

	// Location is the bundle's object, s3://bucket/namespace/name/sha256.json.
	// It is set when state is ready; while a newer revision is processing it
	// still names the last bundle published, which stays valid.
	// +optional
	// +kubebuilder:validation:MaxLength=1100
	Location string `json:"location,omitempty"`

	// SHA256 is the hex SHA-256 digest of the object at location, what a
	// consumer pins in spec.bundle.sha256.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	SHA256 string `json:"sha256,omitempty"`

	// Revision is the cache revision (status.cachedRevision.uuid) the
	// bundle at location holds.
	// +optional
	Revision string `json:"revision,omitempty"`

	// Message says why the bundle is not ready.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// Condition types of a RuleSet.
const (
	ConditionReady       = "Ready"
	ConditionProgressing = "Progressing"
	ConditionDegraded    = "Degraded"
)

// Condition reasons of a RuleSet.
const (
	// ReasonRulesCached: the current inputs compiled and their revision is
	// served (Ready=True).
	ReasonRulesCached = "RulesCached"
	// ReasonCompiling: a newer generation is being compiled (Progressing=True).
	ReasonCompiling = "Compiling"
	// ReasonReconciled: the current generation has been processed
	// (Progressing=False).
	ReasonReconciled = "Reconciled"
	// ReasonAsExpected: nothing is degraded (Degraded=False).
	ReasonAsExpected = "AsExpected"
	// ReasonInvalidRuleSet: the rules do not compile.
	ReasonInvalidRuleSet = "InvalidRuleSet"
	// ReasonSandboxViolation: a directive or operator reaches outside the
	// sandbox (host files, log files, programs, the network).
	ReasonSandboxViolation = "SandboxViolation"
	// ReasonRuleSourceNotFound: a RuleSource in spec.sources does not exist.
	ReasonRuleSourceNotFound = "RuleSourceNotFound"
	// ReasonRuleDataNotFound: a RuleData in spec.data does not exist.
	ReasonRuleDataNotFound = "RuleDataNotFound"
	// ReasonDuplicateReference: spec.sources or spec.data names the same
	// object twice. Nothing is read or compiled.
	ReasonDuplicateReference = "DuplicateReference"
	// ReasonTooLarge: the rule set is larger than Portal compiles: its
	// sources and data files together exceed --waf-max-ruleset-bytes
	// (checked before they are joined), or a data file read by a file
	// operator exceeds --waf-max-data-file-bytes.
	ReasonTooLarge = "TooLarge"
	// ReasonCompileTimeout: the compile did not finish within
	// --waf-compile-timeout. Any change to the RuleSet or its inputs retries.
	ReasonCompileTimeout = "CompileTimeout"
	// ReasonUnsupportedRules: the cached revision holds rules a data plane
	// cannot run (Degraded=True).
	ReasonUnsupportedRules = "UnsupportedRules"
	// ReasonUnsupportedRulesAllowed: it does, and the RuleSet acknowledges
	// them with the allow-unsupported-rules annotation (Degraded=False).
	ReasonUnsupportedRulesAllowed = "UnsupportedRulesAllowed"
	// ReasonUnsupportedRulesUnused: it does, but no Engine with that data
	// plane uses the RuleSet (Degraded=False); an Engine that starts to
	// makes it Degraded.
	ReasonUnsupportedRulesUnused = "UnsupportedRulesUnused"
)

// RuleSet compiles RuleSources and RuleData into one rule set, served by
// Portal's rule set cache as `GET /rules/{namespace}/{name}` to the data
// planes (waf-proxy, the Istio WASM plugin).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=wrs,categories={portal,waf}
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].status`
// +kubebuilder:printcolumn:name="Rules",type=integer,JSONPath=`.status.ruleCount`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].reason`,priority=1
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.cachedRevision.uuid`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RuleSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RuleSetSpec   `json:"spec"`
	Status RuleSetStatus `json:"status,omitempty"`
}

// RuleSetList is a list of RuleSets.
// +kubebuilder:object:root=true
type RuleSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RuleSet `json:"items"`
}
