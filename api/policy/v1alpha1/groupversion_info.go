// Package v1alpha1 holds the portal.io/v1alpha1 API: PortalClusterRule and
// PortalRule, the custom resources that carry Portal's rules, and
// PortalClusterException and PortalException, which exempt objects from them.
//
// +kubebuilder:object:generate=true
// +groupName=portal.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "portal.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, addExceptionTypes)

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
