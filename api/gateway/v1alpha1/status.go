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
}
