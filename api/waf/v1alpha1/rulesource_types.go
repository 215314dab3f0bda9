package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxRulesLength is the largest spec.rules of a RuleSource, in bytes (1.5 MiB).
const MaxRulesLength = 1572864

// RuleSourceSpec holds SecLang rule text.
type RuleSourceSpec struct {
	// Rules is SecLang text: SecRule, SecAction and the other directives of
	// ModSecurity v3 / Coraza. It may include the OWASP Core Rule Set that
	// Portal embeds: `Include @coraza.conf-recommended`,
	// `Include @crs-setup.conf.example` and `Include @owasp_crs/*.conf`. A
	// RuleSet concatenates the rules of its sources in order. Rules that reach
	// outside the sandbox (host files, log files, programs) are rejected; see
	// docs/concepts/waf.md.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1572864
	Rules string `json:"rules"`
}

// RuleSource holds SecLang rule text for RuleSets in the same namespace to
// use. A RuleSource on its own does nothing.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=wrsrc,categories={portal,waf}
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="RuleSets",type=integer,JSONPath=`.status.ruleSetCount`,description="How many RuleSets of the namespace use it"
// +kubebuilder:printcolumn:name="Used By",type=string,JSONPath=`.status.ruleSets`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RuleSource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RuleSourceSpec `json:"spec"`
	Status UsageStatus    `json:"status,omitempty"`
}

// RuleSourceList is a list of RuleSources.
// +kubebuilder:object:root=true
type RuleSourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RuleSource `json:"items"`
}

// MaxUsageNames is the most RuleSet names a RuleSource's or RuleData's
// status lists; ruleSetCount counts them all.
const MaxUsageNames = 32

// UsageStatus says which RuleSets use a RuleSource or RuleData, so `kubectl
// get` shows what an edit reaches and what is safe to delete. Portal's
// leader writes it when a RuleSet starts or stops naming the object.
type UsageStatus struct {
	// RuleSetCount is the number of RuleSets in the namespace that name it.
	// +optional
	RuleSetCount int32 `json:"ruleSetCount,omitempty"`
	// RuleSets names them, sorted, at most 32.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	RuleSets []string `json:"ruleSets,omitempty"`
}
