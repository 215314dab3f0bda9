package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// RuleObject is what PortalClusterRule and PortalRule have in common, so
// controllers can handle both kinds with one code path.
// +kubebuilder:object:generate=false
type RuleObject interface {
	metav1.Object
	runtime.Object
	GetRuleSpec() *RuleSpec
	GetRuleStatus() *RuleStatus
}

// GetRuleSpec implements RuleObject.
func (r *PortalClusterRule) GetRuleSpec() *RuleSpec { return &r.Spec }

// GetRuleStatus implements RuleObject.
func (r *PortalClusterRule) GetRuleStatus() *RuleStatus { return &r.Status }

// GetRuleSpec implements RuleObject.
func (r *PortalRule) GetRuleSpec() *RuleSpec { return &r.Spec }

// GetRuleStatus implements RuleObject.
func (r *PortalRule) GetRuleStatus() *RuleStatus { return &r.Status }
