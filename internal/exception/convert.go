// Package exception loads PortalExceptions and PortalClusterExceptions into
// the rule engine, expires them on time and writes their status. Like the
// rule loader, it is shared infrastructure, not a layer: admission, audit
// and the actions see exceptions only through the engine's results.
package exception

import (
	"errors"
	"fmt"
	"path"
	"slices"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
)

// Kinds of exception custom resources.
const (
	KindCluster    = "PortalClusterException"
	KindNamespaced = "PortalException"
)

// Bounds of a label selector, beyond what the CRD schema bounds: the API
// server takes a selector of any size up to the object's, and every
// exempted kind's objects are matched against it on every evaluation.
const (
	MaxSelectorTerms  = 32
	MaxSelectorValues = 256
)

var exceptionModes = []core.Mode{core.ModeAdmission, core.ModeAudit, "runtime", core.ModeActions}

// FromSpec validates spec and returns the exception it describes; kind,
// namespace and name are its object's. Files (portal eval --exceptions)
// and custom resources go through it alike, so both load the same way.
func FromSpec(spec *policyv1alpha1.ExceptionSpec, kind, namespace, name string) (*core.Exception, error) {
	x := &core.Exception{
		Kind: kind, Namespace: namespace, Name: name,
		Rules: slices.Clone(spec.Rules), Condition: spec.Condition, Reason: spec.Reason,
	}
	if kind == KindCluster {
		x.Namespace = ""
	}
	var errs []error
	if len(x.Rules) == 0 {
		errs = append(errs, errors.New("rules is empty: name the rules the exception exempts from"))
	}
	if x.Reason == "" {
		errs = append(errs, errors.New("reason is required: say why the exception exists"))
	}
	for _, m := range spec.Modes {
		if !slices.Contains(exceptionModes, core.Mode(m)) {
			errs = append(errs, fmt.Errorf("modes: %q is not one of %v", m, exceptionModes))
		}
		x.Modes = append(x.Modes, core.Mode(m))
	}
	if spec.Expires != nil {
		x.Expires = spec.Expires.Time
	}
	m := &spec.Match
	for i, g := range m.GVK {
		x.Match.GVKs = append(x.Match.GVKs, core.GVK{Group: g.Group, Version: g.Version, Kind: g.Kind})
		// Whether a Secret is exempted (status.exemptedCount, a skip in
		// the PolicyReport) would answer the condition about its data: a
		// tenant could read Secrets a bit at a time without the right to.
		if kind == KindNamespaced && g.Group == "" && g.Kind == "Secret" {
			errs = append(errs, fmt.Errorf("match.gvk[%d]: PortalExceptions cannot match Secrets; a PortalClusterException can", i))
		}
	}
	x.Match.Names = slices.Clone(m.Names)
	if m.Namespaces != nil {
		if kind == KindNamespaced {
			errs = append(errs, errors.New("match.namespaces: a PortalException applies only in its own namespace"))
		}
		x.Match.Namespaces = core.NamespaceMatch{Include: slices.Clone(m.Namespaces.Include), Exclude: slices.Clone(m.Namespaces.Exclude)}
	}
	if sel := m.LabelSelector; sel != nil {
		values := 0
		for _, r := range sel.MatchExpressions {
			values += len(r.Values)
		}
		if n := len(sel.MatchLabels) + len(sel.MatchExpressions); n > MaxSelectorTerms || values > MaxSelectorValues {
			errs = append(errs, fmt.Errorf("match.labelSelector has %d terms and %d values: at most %d and %d", n, values, MaxSelectorTerms, MaxSelectorValues))
		}
		x.Match.LabelSelector = sel.DeepCopy()
	}
	return x, errors.Join(errs...)
}

// NamespaceAllowed reports whether PortalExceptions are honoured in ns:
// allowed lists names or shell globs (--exception-namespaces); empty allows
// every namespace.
func NamespaceAllowed(allowed []string, ns string) bool {
	if len(allowed) == 0 {
		return true
	}
	for _, p := range allowed {
		if ok, _ := path.Match(p, ns); ok {
			return true
		}
	}
	return false
}
