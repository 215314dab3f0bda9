package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FinalizerAPIGateway holds an APIGateway while APIRules, RateLimits or
// VirtualServices use its gateway.
const FinalizerAPIGateway = "portal.io/apigateway"

// The reasons an APIGateway's status.reason takes.
const (
	// ReasonOlderAPIGatewayExists: only the oldest APIGateway of the cluster
	// is reconciled; this one is kept in state Warning and does nothing.
	ReasonOlderAPIGatewayExists = "OlderAPIGatewayExists"
	// ReasonDeletionBlocked: the APIGateway is being deleted, but the
	// objects in status.blockingResources still use its gateway.
	ReasonDeletionBlocked = "DeletionBlocked"
	// ReasonGatewayApplied: the default gateway exists and matches the spec.
	ReasonGatewayApplied = "GatewayApplied"
)

// DefaultGateway is the Istio Gateway an APIGateway owns: the gateway that
// APIRules name in spec.gateway.
// +kubebuilder:validation:XValidation:rule="!self.httpsRedirect || has(self.credentialName)",message="httpsRedirect needs credentialName: without a certificate there is no HTTPS server to redirect to"
type DefaultGateway struct {
	// Name of the Istio Gateway.
	// +kubebuilder:default=portal-gateway
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Name string `json:"name,omitempty"`

	// Namespace of the Istio Gateway.
	// +kubebuilder:default=portal-system
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Hosts the gateway serves: DNS names, a leading `*.` for a wildcard.
	// An APIRule's hosts must be among them.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	Hosts []Host `json:"hosts"`

	// Selector picks the ingress gateway workload, as an Istio Gateway's
	// selector.
	// +kubebuilder:default={"istio":"ingressgateway"}
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=16
	// +optional
	Selector map[string]string `json:"selector,omitempty"`

	// CredentialName is the Secret (kubernetes.io/tls, in the ingress
	// gateway's namespace) that holds the certificate of the HTTPS server on
	// port 443. Without it the gateway serves plain HTTP on port 80 only.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CredentialName *string `json:"credentialName,omitempty"`

	// HTTPSRedirect makes the HTTP server on port 80 answer every request
	// with a redirect to HTTPS. It needs credentialName.
	// +kubebuilder:default=false
	// +optional
	HTTPSRedirect bool `json:"httpsRedirect"`
}

// APIGatewaySpec says which default gateway Portal runs.
type APIGatewaySpec struct {
	// Gateway is the default Istio Gateway that the APIGateway creates and
	// deletes with it.
	Gateway DefaultGateway `json:"gateway"`
}

// ObjectReference names an object that uses the gateway.
type ObjectReference struct {
	// Kind is APIRule, RateLimit or VirtualService.
	Kind string `json:"kind"`
	// Namespace of the object.
	Namespace string `json:"namespace"`
	// Name of the object.
	Name string `json:"name"`
}

// APIGatewayStatus is the state of an APIGateway.
type APIGatewayStatus struct {
	Status `json:",inline"`

	// Reason is a CamelCase word for the state: OlderAPIGatewayExists,
	// DeletionBlocked or GatewayApplied.
	// +optional
	Reason string `json:"reason,omitempty"`

	// BlockingResources are the APIRules, RateLimits and VirtualServices
	// that use the gateway and so keep a deleted APIGateway (finalizer
	// portal.io/apigateway) until they are gone. At most 100 are listed.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	BlockingResources []ObjectReference `json:"blockingResources,omitempty"`
}

// APIGateway runs the cluster's default Istio Gateway. It is cluster-scoped
// and meant to be one: when there are several, only the oldest is
// reconciled and the others are kept in state Warning with reason
// OlderAPIGatewayExists. Deleting it is blocked (finalizer
// portal.io/apigateway) while APIRules, RateLimits or VirtualServices use the
// gateway; status.blockingResources lists them.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=apigw,categories={portal,gateway}
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.spec.gateway.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type APIGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec APIGatewaySpec `json:"spec"`
	// +optional
	Status APIGatewayStatus `json:"status,omitempty"`
}

// APIGatewayList is a list of APIGateways.
// +kubebuilder:object:root=true
type APIGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []APIGateway `json:"items"`
}
