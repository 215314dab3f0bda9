// Package v1alpha2 holds the wgpolicyk8s.io/v1alpha2 API: PolicyReport and
// ClusterPolicyReport, the report format of the Kubernetes Policy Working
// Group that Kyverno, Policy Reporter and other tools read. The types follow
// the working group's published schema; Portal generates the CRDs from them
// (deploy/crds) and writes one report per namespace (sharded when large) and
// one cluster-wide report with its audit findings.
//
// +kubebuilder:object:generate=true
// +groupName=wgpolicyk8s.io
package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "wgpolicyk8s.io", Version: "v1alpha2"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PolicyReport{}, &PolicyReportList{}, &ClusterPolicyReport{}, &ClusterPolicyReportList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
