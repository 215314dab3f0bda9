package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// OverridePermissions is what a RuleSet lets an application team tune with
// a RuleSetOverride on its own routes. Anything not listed is refused.
type OverridePermissions struct {
	// RuleIDs are the ranges of rule ids an override may disable.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	RuleIDs []RuleIDRange `json:"ruleIDs,omitempty"`

	// Tags are the rule tags an override may disable (all rules with the
	// tag), e.g. attack-sqli.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9._/-]+$`
	Tags []string `json:"tags,omitempty"`

	// MaxInboundAnomalyThreshold is the highest CRS inbound anomaly score
	// threshold an override may set; 0 lets no override change it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10000
	MaxInboundAnomalyThreshold int32 `json:"maxInboundAnomalyThreshold,omitempty"`
}

// RuleIDRange is the rule ids From to To, both included.
// +kubebuilder:validation:XValidation:rule="self.to >= self.from",message="to must not be below from"
type RuleIDRange struct {
	// From is the first rule id of the range.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=999999999
	From int64 `json:"from"`
	// To is the last rule id of the range.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=999999999
	To int64 `json:"to"`
}

// Contains reports whether id is in the range.
func (r RuleIDRange) Contains(id int64) bool { return id >= r.From && id <= r.To }

// RuleSetOverrideSpec is the tuning an application team applies to the
// rule set that protects its own routes.
type RuleSetOverrideSpec struct {
	// TargetRefs are HTTPRoutes or GRPCRoutes in the override's namespace.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.group == 'gateway.networking.k8s.io' && t.kind in ['HTTPRoute', 'GRPCRoute'])",message="targetRefs must be HTTPRoutes or GRPCRoutes of group gateway.networking.k8s.io"
	TargetRefs []gatewayv1.LocalPolicyTargetReference `json:"targetRefs"`

	// DisableRuleIDs are rule ids to switch off on the targets.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=999999999
	DisableRuleIDs []int64 `json:"disableRuleIDs,omitempty"`

	// DisableTags switch off every rule with one of these tags.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9._/-]+$`
	DisableTags []string `json:"disableTags,omitempty"`

	// InboundAnomalyThreshold replaces the CRS inbound anomaly score
	// threshold on the targets.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	InboundAnomalyThreshold int32 `json:"inboundAnomalyThreshold,omitempty"`
}

// EffectiveOverride is what one target runs.
type EffectiveOverride struct {
	// Kind and Name of the route.
	Kind string `json:"kind"`
	Name string `json:"name"`

	// RuleSet is the rule set the route runs (from its policy), when any.
	// +optional
	RuleSet *EffectiveRuleSet `json:"ruleSet,omitempty"`

	// DisabledRuleIDs, DisabledTags and InboundAnomalyThreshold are what
	// is in force on top of the rule set: the override's, when the rule set
	// permits all of it; nothing otherwise.
	// +optional
	// +listType=atomic
	DisabledRuleIDs []int64 `json:"disabledRuleIDs,omitempty"`
	// DisabledTags are the tags switched off on the route.
	// +optional
	// +listType=atomic
	DisabledTags []string `json:"disabledTags,omitempty"`
	// InboundAnomalyThreshold is the threshold in force; 0 keeps the rule
	// set's.
	// +optional
	InboundAnomalyThreshold int32 `json:"inboundAnomalyThreshold,omitempty"`
}

// RuleSetOverrideStatus says whether the override is in force.
type RuleSetOverrideStatus struct {
	// Conditions: Accepted (reasons Accepted, TargetNotFound, Conflicted,
	// NotPermitted, NoRuleSet).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Routes are the effective rules of each target (at most 16).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Routes []EffectiveOverride `json:"routes,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Reasons of a RuleSetOverride's Accepted condition beside Gateway API's.
const (
	// ReasonNotPermitted: the rule set of a target does not permit part of
	// the override (spec.overrides of the RuleSet); nothing of it applies.
	ReasonNotPermitted = "NotPermitted"
	// ReasonNoRuleSet: a target runs no Portal RuleSet to tune.
	ReasonNoRuleSet = "NoRuleSet"
)

// RuleSetOverride tunes the rule set protecting an application team's own
// HTTPRoutes or GRPCRoutes (disable rule ids or tags, raise the anomaly
// threshold), within what that RuleSet's spec.overrides permits.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=wrso,categories={portal,waf}
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RuleSetOverride struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RuleSetOverrideSpec   `json:"spec"`
	Status RuleSetOverrideStatus `json:"status,omitempty"`
}

// RuleSetOverrideList is a list of RuleSetOverrides.
// +kubebuilder:object:root=true
type RuleSetOverrideList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RuleSetOverride `json:"items"`
}
