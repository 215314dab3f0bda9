package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ExceptionMode names where an exception applies: admission (the webhook
// admits what the rule would refuse), audit (the rule's result on live
// objects is reported as skip), runtime (runtime rules skip the object) or
// actions (no response action of the rule runs against the object, while
// its violation is still reported).
// +kubebuilder:validation:Enum=admission;audit;runtime;actions
type ExceptionMode string

// The exception modes.
const (
	ExceptionModeAdmission ExceptionMode = "admission"
	ExceptionModeAudit     ExceptionMode = "audit"
	ExceptionModeRuntime   ExceptionMode = "runtime"
	ExceptionModeActions   ExceptionMode = "actions"
)

// ExceptionSpec says which rules skip which objects, where and why.
type ExceptionSpec struct {
	// Rules names the rules the exception exempts from, by their name (a
	// rule's spec.name, or its metadata.name). A PortalException exempts
	// from cluster rules (PortalClusterRules and rules files) and from the
	// PortalRules of its own namespace; a PortalClusterException from any
	// rule of that name.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=253
	Rules []string `json:"rules"`

	// Match selects the exempted objects. All criteria must hold.
	Match ExceptionMatch `json:"match"`

	// Condition is an optional expr-lang expression, over the same
	// environment as a rule (object, metadata, request and, for pod-shaped
	// kinds, the pod sugar): the exception applies only when it is true. It
	// runs under the rule evaluation budget; an error or an exhausted budget
	// means the exception does not apply, so a broken condition never opens
	// a hole.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Condition string `json:"condition,omitempty"`

	// Modes lists where the exception applies. Empty means everywhere.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4
	Modes []ExceptionMode `json:"modes,omitempty"`

	// Reason says why the exception exists: it is shown in admission
	// warnings, logs and reports. Required, so every exception explains
	// itself to whoever reviews it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`

	// Expires is when the exception stops applying. Once past, the rules
	// apply again, the Expired condition turns True and an event and a
	// metric say so. Empty means never.
	// +optional
	Expires *metav1.Time `json:"expires,omitempty"`
}

// ExceptionMatch selects objects by kind, name, namespace and labels: a
// rule's match, plus names.
type ExceptionMatch struct {
	// GVK lists the kinds exempted. An empty version matches every version
	// of the kind.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	GVK []GroupVersionKind `json:"gvk"`

	// Names filters by object name; entries may be shell globs
	// ("legacy-*"). Empty means every name.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Names []string `json:"names,omitempty"`

	// Namespaces filters by namespace name (PortalClusterException only:
	// a PortalException applies only in its own namespace).
	// +optional
	Namespaces *NamespaceMatch `json:"namespaces,omitempty"`

	// LabelSelector filters by the object's own labels.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// ExceptionStatus is what Portal observed about an exception.
type ExceptionStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready is True when the exception is loaded and applies;
	// False with NamespaceNotAllowed (a PortalException outside
	// --exception-namespaces), InvalidException (its condition or match
	// does not compile), ExpiresTooLate (a PortalException without expires
	// or past --exception-max-duration) or Expired. Expired is True once expires has
	// passed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// MatchedRules lists the loaded rules the exception names, as
	// "name" for cluster rules and "namespace/name" for PortalRules. A
	// name in spec.rules that is not here matches no loaded rule (a typo,
	// or a rule not loaded yet).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	MatchedRules []string `json:"matchedRules,omitempty"`

	// ExemptedCount is how many live objects audit currently reports as
	// skipped by this exception. Written at a bounded rate, so it lags by
	// seconds.
	// +optional
	ExemptedCount int64 `json:"exemptedCount,omitempty"`
}

// Condition types and reasons of an exception's status.
const (
	ConditionExpired = "Expired"

	ReasonExceptionActive  = "Active"
	ReasonInvalidException = "InvalidException"
	// ReasonNamespaceNotAllowed: a PortalException in a namespace that
	// --exception-namespaces does not list.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonExpiresTooLate: a PortalException without expires, or expiring
	// later than --exception-max-duration after its creation.
	ReasonExpiresTooLate = "ExpiresTooLate"
	ReasonExpired        = "Expired"
	ReasonNotExpired     = "NotExpired"
)

// PortalClusterException exempts matching objects in any namespace (as its
// match allows), and cluster-scoped objects, from the rules it names. It is
// the platform team's tool; keep the right to write it as narrow as the
// right to write PortalClusterRules.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=pcex,categories=portal
// +kubebuilder:printcolumn:name="Rules",type=string,JSONPath=`.spec.rules`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.spec.expires`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Exempted",type=integer,JSONPath=`.status.exemptedCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PortalClusterException struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ExceptionSpec   `json:"spec"`
	Status ExceptionStatus `json:"status,omitempty"`
}

// PortalClusterExceptionList is a list of PortalClusterExceptions.
// +kubebuilder:object:root=true
type PortalClusterExceptionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PortalClusterException `json:"items"`
}

// PortalException exempts matching objects of its own namespace from the
// rules it names. Portal honours it only in the namespaces
// --exception-namespaces lists (every namespace when the flag is empty).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=pex,categories=portal
// +kubebuilder:printcolumn:name="Rules",type=string,JSONPath=`.spec.rules`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.spec.expires`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Exempted",type=integer,JSONPath=`.status.exemptedCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PortalException struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the exception. A PortalException applies only to objects in
	// its own namespace, so it has no match.namespaces.
	// +kubebuilder:validation:XValidation:rule="!has(self.match.namespaces)",message="a PortalException applies only in its own namespace; match.namespaces is for PortalClusterExceptions",fieldPath=".match.namespaces"
	// +kubebuilder:validation:XValidation:rule="!self.match.gvk.exists(g, (!has(g.group) || g.group == '') && g.kind == 'Secret')",message="PortalExceptions cannot match Secrets: which Secrets an exception exempts would tell its author what they hold; a PortalClusterException can",fieldPath=".match.gvk"
	Spec   ExceptionSpec   `json:"spec"`
	Status ExceptionStatus `json:"status,omitempty"`
}

// PortalExceptionList is a list of PortalExceptions.
// +kubebuilder:object:root=true
type PortalExceptionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PortalException `json:"items"`
}

// ExceptionObject is what PortalClusterException and PortalException have
// in common, so controllers can handle both kinds with one code path.
// +kubebuilder:object:generate=false
type ExceptionObject interface {
	metav1.Object
	runtime.Object
	GetExceptionSpec() *ExceptionSpec
	GetExceptionStatus() *ExceptionStatus
}

// GetExceptionSpec implements ExceptionObject.
func (e *PortalClusterException) GetExceptionSpec() *ExceptionSpec { return &e.Spec }

// GetExceptionStatus implements ExceptionObject.
func (e *PortalClusterException) GetExceptionStatus() *ExceptionStatus { return &e.Status }

// GetExceptionSpec implements ExceptionObject.
func (e *PortalException) GetExceptionSpec() *ExceptionSpec { return &e.Spec }

// GetExceptionStatus implements ExceptionObject.
func (e *PortalException) GetExceptionStatus() *ExceptionStatus { return &e.Status }

func addExceptionTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PortalClusterException{}, &PortalClusterExceptionList{}, &PortalException{}, &PortalExceptionList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
