package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RuleDataSpec holds data files.
type RuleDataSpec struct {
	// Files maps a file name to its content. Rules read the files by name, as
	// in `@pmFromFile bad-agents.txt` or `@ipMatchFromFile blocked.txt`. A
	// name is letters, digits, '-', '_' and '.', at most 253 characters, and
	// neither "." nor "..".
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=1024
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 253 && k.matches('^[-._a-zA-Z0-9]+$') && k != '.' && k != '..')",message="file names must match ^[-._a-zA-Z0-9]+$, be at most 253 characters, and not be . or .."
	Files map[string]string `json:"files"`
}

// RuleData holds data files (word lists, IP lists, schemas) for the rules of
// RuleSets in the same namespace. A RuleData on its own does nothing.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=wrd,categories={portal,waf}
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="RuleSets",type=integer,JSONPath=`.status.ruleSetCount`,description="How many RuleSets of the namespace use it"
// +kubebuilder:printcolumn:name="Used By",type=string,JSONPath=`.status.ruleSets`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RuleData struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RuleDataSpec `json:"spec"`
	Status UsageStatus  `json:"status,omitempty"`
}

// RuleDataList is a list of RuleData objects.
// +kubebuilder:object:root=true
type RuleDataList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RuleData `json:"items"`
}
