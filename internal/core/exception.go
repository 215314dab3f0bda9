package core

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ModeActions is an exception mode, not a rule mode: an exception with it
// keeps the rule's response actions off the exempted objects, whatever loop
// found the violation.
const ModeActions Mode = "actions"

// Exception exempts the objects it matches from the rules it names: the
// model of PortalException and PortalClusterException, whatever its source.
type Exception struct {
	// Kind is "PortalException" or "PortalClusterException".
	Kind string
	// Namespace is set for a PortalException: it only ever exempts objects
	// in this namespace.
	Namespace string
	Name      string
	// Rules are the names of the rules it exempts from.
	Rules []string
	Match ExceptionMatch
	// Condition is an optional expression: the exception applies only
	// where it is true.
	Condition string
	// Modes lists where it applies (admission, audit, runtime, actions);
	// empty means everywhere.
	Modes  []Mode
	Reason string
	// Expires is when it stops applying; zero means never.
	Expires time.Time
}

// ExceptionMatch selects the objects an exception exempts.
type ExceptionMatch struct {
	GVKs []GVK
	// Names are object names or shell globs; empty matches every name.
	Names         []string
	Namespaces    NamespaceMatch
	LabelSelector *metav1.LabelSelector
}

// Ref names the exception in warnings, logs, reports and metrics:
// "billing/legacy-billing" for a PortalException, "ci-runners" for a
// PortalClusterException. The two kinds never share a ref, since only a
// PortalException's has a slash.
func (x *Exception) Ref() string {
	if x.Namespace != "" {
		return x.Namespace + "/" + x.Name
	}
	return x.Name
}

// String reads "PortalException billing/legacy-billing".
func (x *Exception) String() string { return fmt.Sprintf("%s %s", x.Kind, x.Ref()) }

// AppliesIn reports whether the exception skips rules in mode m. An empty
// mode (an offline evaluation that names no loop) is covered by every
// exception that skips in some loop: all but one of mode actions alone,
// which never skips, only keeps actions off.
func (x *Exception) AppliesIn(m Mode) bool {
	if len(x.Modes) == 0 || slices.Contains(x.Modes, m) {
		return true
	}
	return m == "" && slices.ContainsFunc(x.Modes, func(y Mode) bool { return y != ModeActions })
}

// ExpiredAt reports whether the exception no longer applies at t.
func (x *Exception) ExpiredAt(t time.Time) bool {
	return !x.Expires.IsZero() && !t.Before(x.Expires)
}

// NamesRule reports whether the exception exempts from r: r's name is
// listed, r is a cluster rule or, for a PortalException, a PortalRule of
// its own namespace, and r lets such an exception apply (its exceptions
// field: none refuses every exception, cluster every PortalException).
func (x *Exception) NamesRule(r *Rule) bool {
	switch {
	case r.Exceptions == ExceptionsNone,
		r.Exceptions == ExceptionsCluster && x.Namespace != "",
		x.Namespace != "" && r.Namespace != "" && r.Namespace != x.Namespace:
		return false
	}
	return slices.Contains(x.Rules, r.Name)
}

// ExceptionPolicy is a rule's exceptions field: which exceptions may
// exempt objects from it.
type ExceptionPolicy string

// The exception policies. A platform team marks the rules no tenant may
// write a hole in as cluster (only its own PortalClusterExceptions apply)
// or none.
const (
	ExceptionsAll     ExceptionPolicy = "all"
	ExceptionsCluster ExceptionPolicy = "cluster"
	ExceptionsNone    ExceptionPolicy = "none"
)

// ExceptionPolicies lists the values of a rule's exceptions field.
var ExceptionPolicies = []ExceptionPolicy{ExceptionsAll, ExceptionsCluster, ExceptionsNone}
