package v1alpha2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyReportSummary counts the results of a report by outcome.
type PolicyReportSummary struct {
	// Pass counts the results whose policy requirements were met.
	// +optional
	Pass int `json:"pass"`

	// Fail counts the results whose policy requirements were not met.
	// +optional
	Fail int `json:"fail"`

	// Warn counts the results whose requirements were not met by a policy
	// that is not scored.
	// +optional
	Warn int `json:"warn"`

	// Error counts the results whose policy could not be evaluated.
	// +optional
	Error int `json:"error"`

	// Skip counts the results whose policy was not selected for evaluation.
	// +optional
	Skip int `json:"skip"`
}

// PolicyResult is the outcome of a policy on a resource:
//   - pass: the policy requirements are met
//   - fail: the policy requirements are not met
//   - warn: the policy requirements are not met and the policy is not scored
//   - error: the policy could not be evaluated
//   - skip: the policy was not selected based on user inputs or applicability
//
// +kubebuilder:validation:Enum=pass;fail;warn;error;skip
type PolicyResult string

// Results.
const (
	ResultPass  PolicyResult = "pass"
	ResultFail  PolicyResult = "fail"
	ResultWarn  PolicyResult = "warn"
	ResultError PolicyResult = "error"
	ResultSkip  PolicyResult = "skip"
)

// PolicyResultSeverity ranks a result: critical, high, medium, low or info.
//
// +kubebuilder:validation:Enum=critical;high;low;medium;info
type PolicyResultSeverity string

// PolicyReportResult is the result of one policy (for Portal: one rule) on
// the resources it names.
type PolicyReportResult struct {
	// Source identifies the policy engine that produced the result: "portal".
	// +optional
	Source string `json:"source"`

	// Policy is the name of the policy; Portal puts the rule name here.
	Policy string `json:"policy"`

	// Rule is the name of the rule within the policy; Portal repeats the
	// rule name.
	// +optional
	Rule string `json:"rule,omitempty"`

	// Category groups policies.
	// +optional
	Category string `json:"category,omitempty"`

	// Severity is how much the result matters.
	// +optional
	Severity PolicyResultSeverity `json:"severity,omitempty"`

	// Timestamp is when the result was found: for Portal, when the finding
	// was first seen.
	Timestamp metav1.Timestamp `json:"timestamp,omitempty"`

	// Result is the outcome.
	Result PolicyResult `json:"result,omitempty"`

	// Scored says whether the result counts towards a score.
	Scored bool `json:"scored,omitempty"`

	// Resources are the checked Kubernetes resources.
	// +optional
	Resources []corev1.ObjectReference `json:"resources,omitempty"`

	// ResourceSelector selects the checked resources by label, instead of
	// naming them. When neither is set, the result is about the report's
	// scope.
	// +optional
	ResourceSelector *metav1.LabelSelector `json:"resourceSelector,omitempty"`

	// Message says what is wrong, for people.
	// +optional
	Message string `json:"message,omitempty"`

	// Properties carry additional information: Portal sets container,
	// containerType and ruleSource where they apply.
	// +optional
	Properties map[string]string `json:"properties,omitempty"`
}

// PolicyReport holds the results of policies on the resources of one
// namespace. Portal writes one per namespace with audit findings (name
// portal, then portal-1, portal-2, ... when the results need several),
// labelled app.kubernetes.io/managed-by=portal and portal.io/shard=N.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=polr
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.scope.kind`,priority=1
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=`.scope.name`,priority=1
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=`.summary.pass`
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=`.summary.fail`
// +kubebuilder:printcolumn:name="Warn",type=integer,JSONPath=`.summary.warn`
// +kubebuilder:printcolumn:name="Error",type=integer,JSONPath=`.summary.error`
// +kubebuilder:printcolumn:name="Skip",type=integer,JSONPath=`.summary.skip`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PolicyReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Scope is the resource the report is about (a Deployment, a
	// Namespace, a Node), when it is about one. Portal's reports cover a
	// namespace and leave it unset.
	// +optional
	Scope *corev1.ObjectReference `json:"scope,omitempty"`

	// ScopeSelector selects the resources the report is about by label.
	// Set at most one of Scope and ScopeSelector.
	// +optional
	ScopeSelector *metav1.LabelSelector `json:"scopeSelector,omitempty"`

	// Summary counts the results by outcome.
	// +optional
	Summary PolicyReportSummary `json:"summary,omitempty"`

	// Results are the policy results.
	// +optional
	Results []PolicyReportResult `json:"results,omitempty"`
}

// PolicyReportList is a list of PolicyReports.
//
// +kubebuilder:object:root=true
type PolicyReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PolicyReport `json:"items"`
}

// ClusterPolicyReport holds the results of policies on cluster-scoped
// resources. Portal writes one (name portal, sharded like PolicyReports).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cpolr
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.scope.kind`,priority=1
// +kubebuilder:printcolumn:name="Name",type=string,JSONPath=`.scope.name`,priority=1
// +kubebuilder:printcolumn:name="Pass",type=integer,JSONPath=`.summary.pass`
// +kubebuilder:printcolumn:name="Fail",type=integer,JSONPath=`.summary.fail`
// +kubebuilder:printcolumn:name="Warn",type=integer,JSONPath=`.summary.warn`
// +kubebuilder:printcolumn:name="Error",type=integer,JSONPath=`.summary.error`
// +kubebuilder:printcolumn:name="Skip",type=integer,JSONPath=`.summary.skip`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterPolicyReport struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Scope is the resource the report is about, when it is about one.
	// +optional
	Scope *corev1.ObjectReference `json:"scope,omitempty"`

	// ScopeSelector selects the resources the report is about by label.
	// Set at most one of Scope and ScopeSelector.
	// +optional
	ScopeSelector *metav1.LabelSelector `json:"scopeSelector,omitempty"`

	// Summary counts the results by outcome.
	// +optional
	Summary PolicyReportSummary `json:"summary,omitempty"`

	// Results are the policy results.
	// +optional
	Results []PolicyReportResult `json:"results,omitempty"`
}

// ClusterPolicyReportList is a list of ClusterPolicyReports.
//
// +kubebuilder:object:root=true
type ClusterPolicyReportList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterPolicyReport `json:"items"`
}
