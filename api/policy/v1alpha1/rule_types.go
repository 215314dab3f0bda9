package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Severity ranks how much a violation matters.
// +kubebuilder:validation:Enum=critical;high;medium;low;info
type Severity string

// ExceptionPolicy says which exceptions may exempt objects from a rule.
type ExceptionPolicy string

// Mode names a loop that evaluates a rule: admission (the validating webhook),
// audit (continuous evaluation of live objects) or runtime (the API server's
// audit events and Falco alerts, with --runtime).
// +kubebuilder:validation:Enum=admission;audit;runtime
type Mode string

// RuntimeEventClass names a class of runtime events: exec, attach,
// port-forward, secret-read, ... or any. docs/reference/runtime-events.md
// lists them with the audit verbs and resources each covers.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9-]*$`
type RuntimeEventClass string

// RuntimeSpec selects the runtime events a rule of mode runtime sees.
type RuntimeSpec struct {
	// Events lists the event classes the rule is evaluated on; any is every
	// event.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	Events []RuntimeEventClass `json:"events"`
}

// EnforcementAction is what a failing rule does at admission: deny rejects the
// request, warn admits it with a warning shown to the client, dryrun admits it
// silently and only records the violation.
// +kubebuilder:validation:Enum=deny;warn;dryrun
type EnforcementAction string

// OnError is what admission does when the rule itself fails to evaluate:
// deny rejects the request (fail closed), allow admits it. Either way the
// error is reported.
// +kubebuilder:validation:Enum=deny;allow
type OnError string

// RuleSpec is one rule. Its fields are the rule YAML schema: the same document,
// minus apiVersion/kind/metadata, is a rule in a rule file.
// +kubebuilder:validation:XValidation:rule="has(self.mode) && 'runtime' in self.mode ? has(self.runtime) : !has(self.runtime)",message="runtime (the event classes) is required with mode runtime, and only read by it"
type RuleSpec struct {
	// Name is the rule's name in messages and reports. Defaults to the
	// object's metadata.name.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name,omitempty"`

	// Enabled switches the rule on or off without deleting it.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// Severity of a violation.
	// +optional
	// +kubebuilder:default=medium
	Severity Severity `json:"severity,omitempty"`

	// Category groups the rule with others of its kind in reports, alerts
	// and `kubectl get` ("Pod Security Standards (Baseline)", "Best
	// Practices"): Policy Reporter groups results by it, as it does by
	// Kyverno's policies.kyverno.io/category annotation. Letters, digits,
	// spaces and ( ) , . / & + : _ - , at most 64 characters.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([A-Za-z0-9 (),./&+:_-]*[A-Za-z0-9)])?$`
	Category string `json:"category,omitempty"`

	// Exceptions says which exceptions may exempt objects from the rule:
	// all (the default: the PortalExceptions of the object's namespace and
	// PortalClusterExceptions), cluster (only PortalClusterExceptions, the
	// platform team's), or none (no exception ever does; only the
	// break-glass namespace annotation and match exclusions remain).
	// +optional
	// +kubebuilder:validation:Enum=all;cluster;none
	Exceptions ExceptionPolicy `json:"exceptions,omitempty"`

	// Mode lists the loops that evaluate the rule.
	// +optional
	// +kubebuilder:default={admission,audit}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +listType=set
	Mode []Mode `json:"mode,omitempty"`

	// EnforcementAction is what a failing rule does at admission.
	// +optional
	// +kubebuilder:default=deny
	EnforcementAction EnforcementAction `json:"enforcementAction,omitempty"`

	// OnError is what admission does when evaluation fails. Defaults to deny
	// for deny rules (fail closed) and allow for warn and dryrun rules.
	// +optional
	OnError OnError `json:"onError,omitempty"`

	// Runtime selects the runtime events a rule of mode runtime is
	// evaluated on; required with mode runtime, refused without it.
	// +optional
	Runtime *RuntimeSpec `json:"runtime,omitempty"`

	// Match selects the objects the rule applies to.
	Match Match `json:"match"`

	// Rule is the expr-lang expression that flags a violation: it is true when
	// the object breaks the rule. See docs/reference/expression-language.md.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	Rule string `json:"rule"`

	// Message is shown to users for a violation. {{ expression }} holes are
	// filled from the same environment the rule sees. Defaults to the name.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`

	// Alert is shorthand for an alertmanager action with this template.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Alert string `json:"alert,omitempty"`

	// Actions are response actions run on violations, in this order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Actions []Action `json:"actions,omitempty"`
}

// Match selects objects by kind, namespace and labels. All criteria must hold.
type Match struct {
	// GVK lists the kinds the rule applies to. An empty version matches every
	// version of the kind.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	GVK []GroupVersionKind `json:"gvk"`

	// Namespaces filters by namespace name; entries may be shell globs.
	// +optional
	Namespaces *NamespaceMatch `json:"namespaces,omitempty"`

	// LabelSelector filters by the object's own labels.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`

	// Operations lists the admission operations the rule checks. Empty means
	// CREATE and UPDATE: a rule about what may run must never stop anyone
	// from deleting what breaks it. List DELETE for rules that guard
	// deletion; they see the object being deleted. Audit ignores this field.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4
	Operations []Operation `json:"operations,omitempty"`
}

// Operation is an admission operation.
// +kubebuilder:validation:Enum=CREATE;UPDATE;DELETE;CONNECT
type Operation string

// GroupVersionKind names a kind. The core group is the empty string.
type GroupVersionKind struct {
	// Group is the API group; empty for the core group (Pod, ConfigMap).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group"`
	// Version is the API version; empty matches every version of the kind.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Version string `json:"version,omitempty"`
	// Kind is the kind, as in the object's kind field (Pod, Deployment).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
}

// NamespaceMatch includes and excludes namespaces by name or glob. An empty
// include matches every namespace; cluster-scoped objects only match when
// include is empty.
type NamespaceMatch struct {
	// Include lists the namespaces (names or shell globs) the rule applies to.
	// Empty means every namespace and cluster-scoped objects; a rule with an
	// include never matches a cluster-scoped object.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Include []string `json:"include,omitempty"`
	// Exclude lists namespaces (names or shell globs) the rule skips, even when
	// include matches them.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Exclude []string `json:"exclude,omitempty"`
}

// Action is a response action run when the rule finds a violation. Which
// fields apply depends on the type; the API server rejects a field the type
// does not read, so a typo never silently does nothing. See
// docs/reference/actions.md.
// +kubebuilder:validation:XValidation:rule="self.type in ['label', 'annotate'] ? has(self.key) : !has(self.key)",message="key is required for label and annotate, and only read by them"
// +kubebuilder:validation:XValidation:rule="self.type in ['label', 'annotate'] || !has(self.value)",message="value is only read by label and annotate"
// +kubebuilder:validation:XValidation:rule="self.type == 'alertmanager' ? has(self.template) : !has(self.template)",message="template is required for alertmanager, and only read by it"
// +kubebuilder:validation:XValidation:rule="self.type in ['label', 'annotate', 'patch-networkpolicy'] || !has(self.keep)",message="keep is only read by label, annotate and patch-networkpolicy"
// +kubebuilder:validation:XValidation:rule="self.type == 'evict' || !has(self.minHealthyReplicas)",message="minHealthyReplicas is only read by evict"
// +kubebuilder:validation:XValidation:rule="self.type == 'revoke-sa-token' || !has(self.recreateServiceAccount)",message="recreateServiceAccount is only read by revoke-sa-token"
type Action struct {
	// Type selects the action.
	// +kubebuilder:validation:Enum=alertmanager;label;annotate;evict;patch-networkpolicy;revoke-sa-token
	Type string `json:"type"`
	// Mode limits the action to violations found by these loops. Empty means
	// every loop the rule runs in. (Not "on": YAML 1.1 reads a bare on key as
	// the boolean true.)
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Mode []Mode `json:"mode,omitempty"`
	// Key is the label or annotation key (label, annotate): a qualified
	// name, optionally prefixed ("portal.io/quarantine"). A PortalRule may
	// only set keys under portal.io/, so a tenant cannot move a pod into
	// or out of a Service or NetworkPolicy by its labels through Portal.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Key string `json:"key,omitempty"`
	// Value is the label or annotation value (label, annotate).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value,omitempty"`
	// Template names the alert template (alertmanager): the alertname of
	// the alerts the rule's findings raise.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Template string `json:"template,omitempty"`
	// RateLimit caps how often the action fires per rule and target, as
	// COUNT/UNIT with UNIT one of s, min, h ("5/min"). Default: the
	// --actions-default-rate-limit flag (10/min).
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9]+/(s|min|h)$`
	// +kubebuilder:validation:MaxLength=16
	RateLimit string `json:"rateLimit,omitempty"`
	// DryRun logs what the action would do instead of doing it (also
	// --actions-dry-run for every rule).
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
	// Keep leaves the label, annotation or quarantine NetworkPolicy in
	// place when the finding clears (label, annotate,
	// patch-networkpolicy). By default Portal removes what it added.
	// +optional
	Keep bool `json:"keep,omitempty"`
	// MinHealthyReplicas (evict) refuses an eviction that would leave the
	// pod's workload (its controlling owner) with fewer ready pods than
	// this: a count ("2") or a percentage of the owner's replicas ("50%").
	// +optional
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:Pattern=`^[0-9]+%?$`
	MinHealthyReplicas string `json:"minHealthyReplicas,omitempty"`
	// RecreateServiceAccount (revoke-sa-token) also deletes and recreates
	// the ServiceAccount under the same name, with a new UID, so every
	// bound token issued for it is rejected. It disrupts every pod that
	// uses the ServiceAccount until the kubelet refreshes their tokens.
	// +optional
	RecreateServiceAccount bool `json:"recreateServiceAccount,omitempty"`
}

// RuleStatus is what Portal observed about a rule.
type RuleStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready is True when the rule compiled and is loaded; it is
	// False with reason KindNotServed while a kind of its match is not
	// served by the API server (the rule stays loaded and applies once it
	// is).
	// BudgetExceeded is True once an evaluation of the active generation ran
	// out of its budget (operations, bytes, nesting depth, or the request's
	// deadline); its reason says which and its message is the last such
	// evaluation. It is removed when the rule's spec changes. ActionsReady,
	// on rules with actions, is False when one of them cannot run: the
	// actions layer is off (ActionsLayerOff), the type is not enabled
	// (ActionDisabled) or Portal lacks the RBAC it needs
	// (ActionNotPermitted).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ParseError says why the rule could not be loaded; empty when it loaded.
	// +optional
	ParseError string `json:"parseError,omitempty"`

	// EvalCount is how many times audit evaluated the rule, one per object
	// evaluation (changes, rule edits and resyncs all count), since the
	// rule's counts were first written. Written by the audit leader at a
	// bounded rate, so it lags by seconds.
	// +optional
	EvalCount int64 `json:"evalCount,omitempty"`

	// ViolationCount is the number of the rule's open audit violations now:
	// objects (or containers, for container-scoped rules) that fail it. It
	// goes down when they are fixed or deleted; it is not a running total.
	// +optional
	ViolationCount int64 `json:"violationCount,omitempty"`

	// LastApplied is when the active generation of the rule was loaded. After
	// an edit that does not compile, that is the last good generation.
	// +optional
	LastApplied *metav1.Time `json:"lastApplied,omitempty"`

	// ActiveOn lists the loops the rule is live in now.
	// +optional
	// +listType=set
	ActiveOn []Mode `json:"activeOn,omitempty"`

	// Reads lists the resources the rule's cluster.* lookups read, as
	// group/resource ("policy/poddisruptionbudgets", "/services" for the
	// core group). Portal watches each of them while the rule is enabled;
	// the LookupsReady condition says whether it can.
	// +optional
	// +listType=set
	Reads []string `json:"reads,omitempty"`
}

// Condition types and reasons of a rule's status.
const (
	ConditionReady = "Ready"

	ReasonLoaded      = "Loaded"
	ReasonInvalidRule = "InvalidRule"
	ReasonDisabled    = "Disabled"
	// ReasonSecretNotAllowed: a PortalRule matches Secrets, which only a
	// PortalClusterRule may.
	ReasonSecretNotAllowed = "SecretNotAllowed"
	// ReasonHighRateKindNotAllowed: a PortalRule matches a kind
	// controllers write at a high rate (Lease, Event, EndpointSlice, the
	// review APIs), which Portal's --allow-tenant-kinds does not list.
	ReasonHighRateKindNotAllowed = "HighRateKindNotAllowed"
	// ReasonClusterScopedKind: a PortalRule matches a cluster-scoped kind
	// (Namespace, Node), which it could never apply to.
	ReasonClusterScopedKind = "ClusterScopedKind"
	// ReasonKindNotServed: the rule loaded, but a kind of its match is not
	// served by the API server (a typo in the group, a CRD not installed
	// yet), so it never fires on it; it applies once the kind is served,
	// without an edit.
	ReasonKindNotServed = "KindNotServed"

	ConditionBudgetExceeded = "BudgetExceeded"

	// Reasons of BudgetExceeded: which budget the last stopped evaluation
	// ran out of.
	ReasonOperationBudget = "OperationBudgetExceeded"
	ReasonByteBudget      = "ByteBudgetExceeded"
	ReasonDepthLimit      = "DepthLimitExceeded"
	ReasonDeadline        = "DeadlineExceeded"
	ReasonAPIReadBudget   = "APIReadBudgetExceeded"
	ReasonPatternLimit    = "PatternLimitExceeded"

	// ConditionLookupsReady is set on rules with cluster.* lookups: True
	// when every resource they read is watched.
	ConditionLookupsReady = "LookupsReady"

	// Reasons of LookupsReady.
	ReasonLookupsWatched = "LookupsWatched"
	// ReasonLookupResourceUnknown: a lookup names a resource the API
	// server does not serve (a typo, a kind instead of a plural, a CRD not
	// installed); its lookups fail until it is served.
	ReasonLookupResourceUnknown = "LookupResourceUnknown"
	// ReasonLookupWatchForbidden: Portal's ServiceAccount may not list and
	// watch a resource a lookup reads; grant it (Helm value
	// watchedGvks).
	ReasonLookupWatchForbidden = "LookupWatchForbidden"
	// ReasonLookupOutOfNamespace: a PortalRule reads a cluster-scoped
	// resource; its lookups are confined to its namespace.
	ReasonLookupOutOfNamespace = "LookupOutOfNamespace"
	// ReasonLookupWatchFailed: the watch of a resource did not start.
	ReasonLookupWatchFailed = "LookupWatchFailed"

	// ConditionActionsReady says whether the rule's response actions can
	// run (written only on rules with actions).
	ConditionActionsReady = "ActionsReady"

	// Reasons of ActionsReady.
	ReasonActionsRunnable    = "ActionsRunnable"
	ReasonActionsDryRun      = "ActionsDryRun"
	ReasonActionsLayerOff    = "ActionsLayerOff"
	ReasonActionDisabled     = "ActionDisabled"
	ReasonActionNotPermitted = "ActionNotPermitted"
)

// PortalClusterRule is a rule that applies to objects in every namespace (as
// its match allows) and to cluster-scoped objects.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=pcr,categories=portal
// +kubebuilder:printcolumn:name="Severity",type=string,JSONPath=`.spec.severity`
// +kubebuilder:printcolumn:name="Category",type=string,JSONPath=`.spec.category`,description="The rule's category, as in its report results and alerts"
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.enforcementAction`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Actions",type=string,JSONPath=`.status.conditions[?(@.type=="ActionsReady")].reason`,description="Whether the rule's response actions can run (ActionsRunnable, ActionsLayerOff, ActionNotPermitted, ...); empty for rules without actions"
// +kubebuilder:printcolumn:name="Violations",type=integer,JSONPath=`.status.violationCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PortalClusterRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RuleSpec   `json:"spec"`
	Status RuleStatus `json:"status,omitempty"`
}

// PortalClusterRuleList is a list of PortalClusterRules.
// +kubebuilder:object:root=true
type PortalClusterRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PortalClusterRule `json:"items"`
}

// PortalRule is a rule owned by one namespace: it only ever matches objects in
// its own namespace, whatever its match says.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=pr,categories=portal
// +kubebuilder:printcolumn:name="Severity",type=string,JSONPath=`.spec.severity`
// +kubebuilder:printcolumn:name="Category",type=string,JSONPath=`.spec.category`,description="The rule's category, as in its report results and alerts"
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.enforcementAction`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Actions",type=string,JSONPath=`.status.conditions[?(@.type=="ActionsReady")].reason`,description="Whether the rule's response actions can run (ActionsRunnable, ActionsLayerOff, ActionNotPermitted, ...); empty for rules without actions"
// +kubebuilder:printcolumn:name="Violations",type=integer,JSONPath=`.status.violationCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PortalRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the rule, in the rule schema of PortalClusterRule. A
	// PortalRule cannot match Secrets (a PortalClusterRule can): whoever
	// may write PortalRules in a namespace would otherwise learn from their
	// verdicts a bit of every Secret written there, without the right to
	// read Secrets.
	// +kubebuilder:validation:XValidation:rule="!self.match.gvk.exists(g, (!has(g.group) || g.group == '') && g.kind == 'Secret')",message="PortalRules cannot match Secrets; a PortalClusterRule can",fieldPath=".match.gvk"
	// +kubebuilder:validation:XValidation:rule="!self.match.gvk.exists(g, ((has(g.group) ? g.group : '') + '/' + g.kind) in ['/Namespace', '/Node', '/PersistentVolume', '/ComponentStatus', 'rbac.authorization.k8s.io/ClusterRole', 'rbac.authorization.k8s.io/ClusterRoleBinding', 'storage.k8s.io/StorageClass', 'storage.k8s.io/CSIDriver', 'storage.k8s.io/CSINode', 'storage.k8s.io/VolumeAttachment', 'apiextensions.k8s.io/CustomResourceDefinition', 'admissionregistration.k8s.io/ValidatingWebhookConfiguration', 'admissionregistration.k8s.io/MutatingWebhookConfiguration', 'admissionregistration.k8s.io/ValidatingAdmissionPolicy', 'admissionregistration.k8s.io/ValidatingAdmissionPolicyBinding', 'scheduling.k8s.io/PriorityClass', 'networking.k8s.io/IngressClass', 'node.k8s.io/RuntimeClass', 'apiregistration.k8s.io/APIService', 'certificates.k8s.io/CertificateSigningRequest', 'flowcontrol.apiserver.k8s.io/FlowSchema', 'flowcontrol.apiserver.k8s.io/PriorityLevelConfiguration', 'portal.io/PortalClusterRule', 'gateway.networking.k8s.io/GatewayClass'])",message="PortalRules only match objects in their own namespace, and this kind is cluster-scoped, so the rule would never apply; use a PortalClusterRule",fieldPath=".match.gvk"
	Spec   RuleSpec   `json:"spec"`
	Status RuleStatus `json:"status,omitempty"`
}

// PortalRuleList is a list of PortalRules.
// +kubebuilder:object:root=true
type PortalRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PortalRule `json:"items"`
}

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PortalClusterRule{}, &PortalClusterRuleList{}, &PortalRule{}, &PortalRuleList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
