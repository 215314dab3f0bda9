package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The binding kinds register themselves, so the RuleSet kinds' registration
// stays as it is.
func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion,
			&WAFGatewayBindingPolicy{}, &WAFGatewayBindingPolicyList{},
			&RuleSetOverride{}, &RuleSetOverrideList{},
		)
		return nil
	})
}

// MaxPolicyTargets is the most targetRefs a WAFGatewayBindingPolicy or a
// RuleSetOverride holds, and so the most ancestors its status lists.
const MaxPolicyTargets = 16

// RuleSetReference names a RuleSet. A RuleSet in another namespace is used
// only while a ReferenceGrant in that namespace allows it.
type RuleSetReference struct {
	// Name of the RuleSet.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the RuleSet; the policy's own namespace when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// BundleReference locates a compiled rule set bundle in S3-compatible
// storage.
type BundleReference struct {
	// Location is s3://bucket/key. Portal reads it with its own storage
	// credentials, so a policy may name only keys its namespace is allowed:
	// by default those Portal publishes for the namespace,
	// s3://PUBLISH-BUCKET/PUBLISH-PREFIX<namespace>/...; the operator can
	// allow other roots (--bundle-namespace-locations) and shared ones
	// (--bundle-shared-locations). Any other location is refused
	// (LocationNotAllowed) before storage is asked.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/.+$`
	Location string `json:"location"`

	// SHA256 is the hex sha256 of the bundle; a bundle with another digest
	// is refused (IntegrityError).
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256"`
}

// SecurityLogDestinationType is where the data plane writes its security
// (audit) log.
// +kubebuilder:validation:Enum=Stderr;File;Syslog
type SecurityLogDestinationType string

// Destination types of a security log.
const (
	SecurityLogToStderr SecurityLogDestinationType = "Stderr"
	SecurityLogToFile   SecurityLogDestinationType = "File"
	SecurityLogToSyslog SecurityLogDestinationType = "Syslog"
)

// SecurityLogDestination says where one security log goes.
// +kubebuilder:validation:XValidation:rule="self.type == 'File' ? has(self.file) : !has(self.file)",message="file is required when type is File, and only then"
// +kubebuilder:validation:XValidation:rule="self.type == 'Syslog' ? has(self.syslog) : !has(self.syslog)",message="syslog is required when type is Syslog, and only then"
type SecurityLogDestination struct {
	// Type is Stderr, File or Syslog.
	Type SecurityLogDestinationType `json:"type"`

	// File is the file the log is appended to, for type File.
	// +optional
	File *SecurityLogFile `json:"file,omitempty"`

	// Syslog is the syslog server, for type Syslog.
	// +optional
	Syslog *SecurityLogSyslog `json:"syslog,omitempty"`
}

// SecurityLogFile is a log file inside the data plane's security log
// directory (waf-proxy --security-log-dir).
type SecurityLogFile struct {
	// Path is relative to the data plane's security log directory; it may
	// not leave it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(s, s == '..' || s == '.')",message="path may not contain . or .. segments"
	Path string `json:"path"`
}

// SecurityLogSyslog is a syslog server: each matched rule is one RFC 5424
// message (facility local0, severity warning, app name portal-waf-proxy)
// whose text is the JSON line of the match.
type SecurityLogSyslog struct {
	// Server is host:port.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=260
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+:[0-9]{1,5}$`
	Server string `json:"server"`

	// Protocol is TCP (RFC 6587 octet-counted framing) or UDP (RFC 5426:
	// one message per datagram).
	// +kubebuilder:validation:Enum=TCP;UDP
	// +kubebuilder:default=TCP
	// +optional
	Protocol SyslogProtocol `json:"protocol,omitempty"`
}

// SyslogProtocol is the transport of a Syslog security log.
type SyslogProtocol string

// Syslog transports.
const (
	SyslogTCP SyslogProtocol = "TCP"
	SyslogUDP SyslogProtocol = "UDP"
)

// SecurityLog is one security log of the policy: every request a rule of
// the rule set matches is written there, as the data plane's audit log.
type SecurityLog struct {
	// Name identifies the log in the list.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Destination is where the log goes.
	Destination SecurityLogDestination `json:"destination"`
}

// WAFGatewayBindingPolicySpec binds a rule set to Gateways or Routes.
// +kubebuilder:validation:XValidation:rule="has(self.ruleSet) != has(self.bundle)",message="exactly one of ruleSet and bundle is required"
type WAFGatewayBindingPolicySpec struct {
	// TargetRefs are the Gateways, HTTPRoutes or GRPCRoutes, in the policy's
	// namespace, the policy applies to; all of one kind. A Gateway-level
	// policy protects every route attached to the Gateway; a Route-level
	// policy replaces it for that route.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.group == 'gateway.networking.k8s.io' && t.kind in ['Gateway', 'HTTPRoute', 'GRPCRoute'])",message="targetRefs must be Gateways, HTTPRoutes or GRPCRoutes of group gateway.networking.k8s.io"
	// +kubebuilder:validation:XValidation:rule="self.all(t, t.kind == self[0].kind)",message="targetRefs must all be of one kind"
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, a.kind == b.kind && a.name == b.name))",message="targetRefs must not name the same object twice"
	TargetRefs []gatewayv1.LocalPolicyTargetReference `json:"targetRefs"`

	// RuleSet is the Portal RuleSet whose latest cached revision the
	// targets run. Exactly one of ruleSet and bundle.
	// +optional
	RuleSet *RuleSetReference `json:"ruleSet,omitempty"`

	// Bundle is a compiled bundle in S3-compatible storage (needs
	// --bundle-storage-url). Exactly one of ruleSet and bundle.
	// +optional
	Bundle *BundleReference `json:"bundle,omitempty"`

	// SecurityLogs are where the data plane writes the requests the rules
	// match (its audit log). Empty means the data plane's own log.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	SecurityLogs []SecurityLog `json:"securityLogs,omitempty"`

	// FailOpen lets the targets' traffic through uninspected while the rule
	// set is not available to the data plane (never fetched, not found, not
	// permitted). False, the default, answers it 503.
	// +optional
	FailOpen bool `json:"failOpen,omitempty"`
}

// EffectiveRuleSet is what the policy resolved its rule source to.
type EffectiveRuleSet struct {
	// Namespace and Name of the RuleSet.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`

	// Revision is the cached revision the data planes are given; empty
	// while the RuleSet has none.
	// +optional
	Revision string `json:"revision,omitempty"`
}

// WAFGatewayBindingPolicyStatus is what Portal made of the policy.
type WAFGatewayBindingPolicyStatus struct {
	// Ancestors holds one entry per target (at most 16), with the conditions
	// Accepted, ResolvedRefs and Programmed.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Ancestors []gatewayv1.PolicyAncestorStatus `json:"ancestors,omitempty"`

	// RuleSet is the rule set the policy resolved to, while it resolves.
	// +optional
	RuleSet *EffectiveRuleSet `json:"ruleSet,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Condition types and reasons of a WAFGatewayBindingPolicy, per ancestor.
// Accepted, TargetNotFound, Conflicted and Invalid are Gateway API's policy
// reasons (gatewayv1.PolicyReason*).
const (
	ConditionResolvedRefs = "ResolvedRefs"
	ConditionProgrammed   = "Programmed"

	// ReasonResolvedRefs: the rule source resolved (ResolvedRefs=True).
	ReasonResolvedRefs = "ResolvedRefs"
	// ReasonInvalidRef: the RuleSet does not exist or has no compiled
	// revision.
	ReasonInvalidRef = "InvalidRef"
	// ReasonRefNotPermitted: the RuleSet is in another namespace and no
	// ReferenceGrant there allows the reference.
	ReasonRefNotPermitted = "RefNotPermitted"
	// ReasonProgrammed: the rule set is in the table the cache serves for
	// the target's Gateways (Programmed=True).
	ReasonProgrammed = "Programmed"
	// ReasonFetchError: the bundle could not be fetched (or bundle storage
	// is not configured).
	ReasonFetchError = "FetchError"
	// ReasonIntegrityError: the fetched bundle does not have spec.bundle.sha256.
	ReasonIntegrityError = "IntegrityError"
	// ReasonLocationNotAllowed: spec.bundle.location is outside the keys
	// the policy's namespace may read; storage was not asked.
	ReasonLocationNotAllowed = "LocationNotAllowed"
	// ReasonDeploymentError: the table of a Gateway could not be served
	// (too large).
	ReasonDeploymentError = "DeploymentError"
	// ReasonTableLimitExceeded: the target route is left out of a
	// Gateway's route table, which cannot hold it within its bounds (rows,
	// bytes, policies, regular expression instructions a request host
	// meets) beside the older routes of that Gateway.
	ReasonTableLimitExceeded = "TableLimitExceeded"
	// ReasonUnsupportedMatch: the target route is left out of its
	// Gateways' route tables: one of its matches is a regular expression
	// the data plane does not run (does not parse, or is too long or too
	// complex).
	ReasonUnsupportedMatch = "UnsupportedMatch"
	// ReasonPending: nothing to program yet (the policy is not accepted or
	// its references do not resolve).
	ReasonPending = "Pending"
)

// ConditionPolicyAffected is the condition Portal sets on every Gateway
// and Route a WAFGatewayBindingPolicy affects (reason PolicyAffected).
const (
	ConditionPolicyAffected = "portal.io/WAFGatewayBindingPolicyAffected"
	ReasonPolicyAffected    = "PolicyAffected"
	// BindingControllerName is the controllerName of the status Portal
	// writes on policies and routes.
	BindingControllerName = "portal.io/waf-binding"
	// ConditionRouteTableAccepted is set False, with reason
	// TableLimitExceeded or UnsupportedMatch, on a Route's Portal entry
	// for a Gateway whose route table leaves the Route out: that Gateway's
	// data planes match its requests as if it were not attached (another
	// route's rows, else the Gateway-level policy). Absent while the Route
	// is in the table.
	ConditionRouteTableAccepted = "portal.io/WAFRouteTableAccepted"
)

// WAFGatewayBindingPolicy attaches a WAF rule set to Gateway API Gateways
// and Routes, with inherited attachment: a Gateway-level policy protects
// every route of the Gateway, a Route-level one replaces it for that route.
// Two policies on one object: the oldest wins (then namespace/name), the
// others are Conflicted.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="gateway.networking.k8s.io/policy=inherited"
// +kubebuilder:resource:scope=Namespaced,shortName=wafgbp,categories={portal,waf,gateway-api}
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRefs[0].kind`
// +kubebuilder:printcolumn:name="RuleSet",type=string,JSONPath=`.spec.ruleSet.name`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.ancestors[0].conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Programmed",type=string,JSONPath=`.status.ancestors[0].conditions[?(@.type=="Programmed")].status`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.ruleSet.revision`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WAFGatewayBindingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WAFGatewayBindingPolicySpec   `json:"spec"`
	Status WAFGatewayBindingPolicyStatus `json:"status,omitempty"`
}

// WAFGatewayBindingPolicyList is a list of WAFGatewayBindingPolicies.
// +kubebuilder:object:root=true
type WAFGatewayBindingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WAFGatewayBindingPolicy `json:"items"`
}
