package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// State is the processing state of an APIGateway, APIRule or RateLimit.
// +kubebuilder:validation:Enum=Ready;Error;Warning;Processing;Deleting
type State string

// The states a controller reports in status.state.
const (
	// StateReady: the resources the object asks for exist and match it.
	StateReady State = "Ready"
	// StateError: the object cannot be applied; status.description says why.
	StateError State = "Error"
	// StateWarning: the object is applied, or kept, with a caveat that
	// status.description (and, where the kind has one, status.reason) names.
	StateWarning State = "Warning"
	// StateProcessing: the controller is applying the object.
	StateProcessing State = "Processing"
	// StateDeleting: the object is being deleted.
	StateDeleting State = "Deleting"
)

// Status is the state a controller reports for an object.
type Status struct {
	// State is Ready, Error, Warning, Processing or Deleting.
	// +optional
	State State `json:"state,omitempty"`

	// Description says, in words, why the object is in its state and, for
	// Error and Warning, what to fix.
	// +optional
	Description string `json:"description,omitempty"`

	// LastProcessedTime is when the controller last processed the object.
	// +optional
	LastProcessedTime *metav1.Time `json:"lastProcessedTime,omitempty"`

	// Conditions hold the Ready condition: True once the object's Istio
	// configuration is applied, with a reason (a CamelCase word, see the
	// Reason constants) and the generation it describes.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConditionReady is the condition type every gateway.portal.io kind reports.
const ConditionReady = "Ready"

// The reasons of an APIRule's or RateLimit's Ready condition.
const (
	// ReasonApplied: the generated Istio objects exist and match the spec.
	ReasonApplied = "Applied"
	// ReasonInvalid: the spec breaks a rule the API server cannot check
	// (overlapping paths, inconsistent JWT issuers, a regex that does not
	// compile, ...); the description names it.
	ReasonInvalid = "Invalid"
	// ReasonCrossNamespaceService: a service names another namespace. An
	// APIRule may only expose Services of its own namespace.
	ReasonCrossNamespaceService = "CrossNamespaceService"
	// ReasonHostInUse: a host overlaps (equals, or a wildcard matches) one
	// already served by a VirtualService that is not this APIRule's, or
	// claimed by an older APIRule.
	ReasonHostInUse = "HostInUse"
	// ReasonJWKSNotAllowed: a jwksUri names a loopback, link-local, private
	// or cluster-internal host, which istiod would fetch from inside the
	// cluster; --apigateway-jwks-allow-internal lets named ones through.
	ReasonJWKSNotAllowed = "JWKSNotAllowed"
	// ReasonGatewayNotFound: spec.gateway names no Istio Gateway, or one
	// that cannot complete a short host.
	ReasonGatewayNotFound = "GatewayNotFound"
	// ReasonServiceNotFound: a Service the APIRule forwards to does not
	// exist or selects no pods.
	ReasonServiceNotFound = "ServiceNotFound"
	// ReasonNoSidecar: a target pod runs without an Istio sidecar, so the
	// AuthorizationPolicy and RequestAuthentication would not apply.
	ReasonNoSidecar = "NoSidecar"
	// ReasonNameTaken: an object Portal would write exists and belongs to
	// someone else; Portal does not take it over.
	ReasonNameTaken = "NameTaken"
	// ReasonApplyFailed: the API server refused a generated object.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonConflict: another, older RateLimit already selects the same
	// workload; a workload has one RateLimit.
	ReasonConflict = "Conflict"
	// ReasonNoMatchingPods: a RateLimit's selectorLabels select no pod.
	ReasonNoMatchingPods = "NoMatchingPods"
)
