// Package v1alpha1 holds the gateway.portal.io/v1alpha1 API: APIGateway,
// APIRule and RateLimit, the custom resources that expose workloads through
// an Istio ingress gateway and rate-limit them.
//
// The field names and their meaning follow the Kyma API Gateway module
// (APIRule v2, RateLimit v1alpha1, APIGateway v1alpha1), so its manifests
// port by changing the group and version. Validation that the schema can
// express lives on the types (OpenAPI and CEL); the rest (a rule's path and
// methods overlapping an earlier rule's, a regular expression that does not
// compile) is for the controllers, which report it in status.
//
// +kubebuilder:object:generate=true
// +groupName=gateway.portal.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "gateway.portal.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&APIGateway{}, &APIGatewayList{},
		&APIRule{}, &APIRuleList{},
		&RateLimit{}, &RateLimitList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
