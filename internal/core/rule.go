// Package core holds the contracts the layers of Portal share: the rule model,
// evaluation results and the small interfaces each layer implements or consumes.
// It holds types and interfaces only; behaviour lives in the packages that
// implement them.
package core

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Severity ranks how much a violation matters to the people who read reports.
type Severity string

const (
	SeverityCritical Severity = "critical"
	SeverityHigh     Severity = "high"
	SeverityMedium   Severity = "medium"
	SeverityLow      Severity = "low"
	SeverityInfo     Severity = "info"
)

// Mode names a loop that evaluates a rule.
type Mode string

const (
	ModeAdmission Mode = "admission"
	ModeAudit     Mode = "audit"
	// ModeRuntime evaluates a rule on runtime events: the API server's
	// audit events and Falco alerts, each one evaluation.
	ModeRuntime Mode = "runtime"
)

// EnforcementAction says what a failing rule does at admission.
type EnforcementAction string

const (
	ActionDeny   EnforcementAction = "deny"
	ActionWarn   EnforcementAction = "warn"
	ActionDryRun EnforcementAction = "dryrun"
)

// OnError says how admission treats a rule whose evaluation errored.
type OnError string

const (
	OnErrorDeny  OnError = "deny"
	OnErrorAllow OnError = "allow"
)

// Rule is one parsed rule, whatever its source (folder file or custom resource).
// The expression flags a violation: it evaluates to true when the object breaks
// the rule.
type Rule struct {
	Name     string
	Enabled  bool
	Severity Severity
	// Category groups the rule in reports and alerts ("Best Practices");
	// empty when the rule names none.
	Category string
	// Exceptions says which exceptions may exempt from the rule:
	// ExceptionsAll (also when empty), ExceptionsCluster or ExceptionsNone.
	Exceptions        ExceptionPolicy
	Modes             []Mode
	EnforcementAction EnforcementAction
	OnError           OnError
	Match             Match
	Expression        string
	Message           string
	Alert             string
	Actions           []ActionSpec
	// Runtime says which runtime events a rule of mode runtime sees.
	Runtime RuntimeMatch

	// Namespace is set for namespaced rules (PortalRule): such a rule only ever
	// matches objects in this namespace.
	Namespace string
	// Source says where the rule came from, for error messages and status.
	Source Source
}

// HasMode reports whether the rule runs in mode m.
func (r *Rule) HasMode(m Mode) bool {
	for _, x := range r.Modes {
		if x == m {
			return true
		}
	}
	return false
}

// MetricLabel is the rule's value of the rule label of Portal's per-rule
// metrics: its name, qualified by its namespace for a PortalRule
// ("team-a/no-latest"). A tenant picks a PortalRule's name freely, so it
// must not count into (or hide in) a cluster rule's series of that name.
func (r *Rule) MetricLabel() string {
	if r.Namespace != "" {
		return r.Namespace + "/" + r.Name
	}
	return r.Name
}

// AlertName is the alertname of the rule's alerts: its alert shorthand, or
// the template of its first alertmanager action; "" when it has neither.
func (r *Rule) AlertName() string {
	if r.Alert != "" {
		return r.Alert
	}
	for _, a := range r.Actions {
		if a.Type == "alertmanager" && a.Params["template"] != "" {
			return a.Params["template"]
		}
	}
	return ""
}

// RuntimeMatch selects the runtime events a rule of mode runtime is
// evaluated on.
type RuntimeMatch struct {
	// Events are the event classes ("exec", "secret-read", "any"); an
	// event is evaluated by the rules that list one of its classes.
	Events []string
}

// Match selects the objects a rule applies to.
type Match struct {
	GVKs          []GVK
	Namespaces    NamespaceMatch
	LabelSelector *metav1.LabelSelector
	// Operations are the admission operations checked; empty means
	// DefaultOperations.
	Operations []string
}

// DefaultOperations are the admission operations a rule checks unless it
// lists its own.
var DefaultOperations = []string{"CREATE", "UPDATE"}

// ChecksOperation reports whether an admission request of operation op is
// checked by a rule with this match.
func (m *Match) ChecksOperation(op string) bool {
	ops := m.Operations
	if len(ops) == 0 {
		ops = DefaultOperations
	}
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

// GVK names a kind. An empty Version matches every version of the kind.
type GVK struct {
	Group   string `json:"group"`
	Version string `json:"version,omitempty"`
	Kind    string `json:"kind"`
}

// String reads like an apiVersion and kind: "v1 Pod", "apps/* Deployment",
// or just "Pod" for every version of a core kind.
func (g GVK) String() string {
	switch {
	case g.Group == "" && g.Version == "":
		return g.Kind
	case g.Group == "":
		return g.Version + " " + g.Kind
	case g.Version == "":
		return g.Group + "/* " + g.Kind
	}
	return g.Group + "/" + g.Version + " " + g.Kind
}

// NamespaceMatch filters by namespace name; entries may use shell globs
// ("team-*"). An empty Include matches every namespace, and cluster-scoped
// objects only match when Include is empty.
type NamespaceMatch struct {
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
}

// ActionSpec is one response action a rule asks for. Type selects the action;
// the remaining keys are its parameters.
type ActionSpec struct {
	Type string
	// Modes limits the action to violations of these loops; empty means all.
	Modes  []Mode
	Params map[string]string
}

// Source locates a rule for the humans reading errors.
type Source struct {
	// Kind is "file", "PortalClusterRule" or "PortalRule".
	Kind      string
	Path      string
	Line      int
	Namespace string
	Name      string
}

func (s Source) String() string {
	switch {
	case s.Kind == "file" && s.Line > 0:
		return fmt.Sprintf("%s:%d", s.Path, s.Line)
	case s.Kind == "file":
		return s.Path
	case s.Namespace != "":
		return fmt.Sprintf("%s %s/%s", s.Kind, s.Namespace, s.Name)
	default:
		return fmt.Sprintf("%s %s", s.Kind, s.Name)
	}
}
