// Package v1alpha1 holds the waf.portal.io/v1alpha1 API: RuleSource, RuleData
// and RuleSet, the custom resources that carry web application firewall rules
// in the SecLang dialect of ModSecurity and Coraza.
//
// The field names and their meaning follow the Coraza Kubernetes Operator
// (group waf.k8s.coraza.io), so its manifests port by changing the group.
//
// +kubebuilder:object:generate=true
// +groupName=waf.portal.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "waf.portal.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&RuleSource{}, &RuleSourceList{},
		&RuleData{}, &RuleDataList{},
		&RuleSet{}, &RuleSetList{},
		&Engine{}, &EngineList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
