// Package rule turns rule documents (folder files and PortalClusterRule /
// PortalRule objects) into compiled rules, and keeps the index the engine
// evaluates from up to date as sources change.
package rule

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/didyoumean"
)

var (
	minHealthy = regexp.MustCompile(`^[0-9]+%?$`)
	// category is the CRD's pattern for spec.category: printable words a
	// report, an alert label and a kubectl column show as they are.
	category   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9 (),./&+:_-]*[A-Za-z0-9)])?$`)
	severities = []core.Severity{core.SeverityCritical, core.SeverityHigh, core.SeverityMedium, core.SeverityLow, core.SeverityInfo}
	modes      = []core.Mode{core.ModeAdmission, core.ModeAudit, core.ModeRuntime}
	// defaultModes are the loops of a rule that names none: runtime rules
	// say so, and say which events.
	defaultModes = []core.Mode{core.ModeAdmission, core.ModeAudit}
	enforce      = []core.EnforcementAction{core.ActionDeny, core.ActionWarn, core.ActionDryRun}
	actions      = ActionTypes()
)

// OutputKinds are the kinds Portal writes its findings to (the policy report
// sink's formats). No rule may match them: a rule whose message quotes what a
// report write changes (its resourceVersion) makes every write change the
// finding, and so cause the next write, forever.
var OutputKinds = []schema.GroupKind{
	{Group: "wgpolicyk8s.io", Kind: "PolicyReport"},
	{Group: "wgpolicyk8s.io", Kind: "ClusterPolicyReport"},
	{Group: "openreports.io", Kind: "Report"},
	{Group: "openreports.io", Kind: "ClusterReport"},
}

// maxCategory bounds a category, as the CRD does: folder files do not pass
// the API server.
const maxCategory = 64

// maxAlertName bounds an alertname, as the CRD does (spec.alert,
// actions[].template): folder files do not pass the API server.
const maxAlertName = 253

// FromSpec applies the schema defaults to spec and validates it, the same way
// for every source, so a folder file and a custom resource with the same
// fields load the same rule. name is used when spec.name is empty.
func FromSpec(spec *policyv1alpha1.RuleSpec, name string, src core.Source) (*core.Rule, error) {
	r := &core.Rule{
		Name:              spec.Name,
		Enabled:           spec.Enabled == nil || *spec.Enabled,
		Severity:          core.Severity(spec.Severity),
		Category:          spec.Category,
		Exceptions:        core.ExceptionPolicy(spec.Exceptions),
		EnforcementAction: core.EnforcementAction(spec.EnforcementAction),
		OnError:           core.OnError(spec.OnError),
		Expression:        spec.Rule,
		Message:           spec.Message,
		Alert:             spec.Alert,
		Source:            src,
	}
	if r.Name == "" {
		r.Name = name
	}
	var errs []error
	if r.Name == "" {
		errs = append(errs, fieldErr("name", "name is required"))
	}
	if len(spec.Alert) > maxAlertName {
		errs = append(errs, fieldErr("alert", "alert is %d characters, more than %d: it is the alertname of every alert the rule raises", len(spec.Alert), maxAlertName))
	}
	if c := spec.Category; c != "" && (len(c) > maxCategory || !category.MatchString(c)) {
		errs = append(errs, fieldErr("category", "category %q is not at most %d characters of letters, digits, spaces and ( ) , . / & + : _ - , starting with a letter or digit", core.Truncate(c, maxCategory), maxCategory))
	}
	if r.Exceptions == "" {
		r.Exceptions = core.ExceptionsAll
	} else if !slices.Contains(core.ExceptionPolicies, r.Exceptions) {
		errs = append(errs, fieldErr("exceptions", "exceptions %q is not one of %v", r.Exceptions, core.ExceptionPolicies))
	}
	if r.Severity == "" {
		r.Severity = core.SeverityMedium
	} else if !slices.Contains(severities, r.Severity) {
		errs = append(errs, fieldErr("severity", "severity %q is not one of %v%s", r.Severity, severities, meant(r.Severity, severities)))
	}
	if r.EnforcementAction == "" {
		r.EnforcementAction = core.ActionDeny
	} else if !slices.Contains(enforce, r.EnforcementAction) {
		errs = append(errs, fieldErr("enforcementAction", "enforcementAction %q is not one of %v%s", r.EnforcementAction, enforce, meant(r.EnforcementAction, enforce)))
	}
	switch r.OnError {
	case "":
		r.OnError = core.OnErrorAllow
		if r.EnforcementAction == core.ActionDeny {
			r.OnError = core.OnErrorDeny
		}
	case core.OnErrorDeny, core.OnErrorAllow:
	default:
		errs = append(errs, fieldErr("onError", "onError %q is not one of [deny allow]", r.OnError))
	}
	switch {
	case spec.Mode == nil:
		r.Modes = slices.Clone(defaultModes)
	case len(spec.Mode) == 0:
		errs = append(errs, fieldErr("mode", "mode is empty: list at least one of %v, or leave it out for admission and audit", modes))
	default:
		r.Modes, errs = convertModes("mode", spec.Mode, errs)
	}
	if spec.Rule == "" {
		errs = append(errs, fieldErr("rule", "rule (the expression) is required"))
	}
	r.Runtime, errs = convertRuntime(spec.Runtime, r.HasMode(core.ModeRuntime), errs)
	r.Match, errs = convertMatch(spec.Match, errs)
	r.Actions, errs = convertActions(spec, src, errs)
	if err := errors.Join(errs...); err != nil {
		if r.Name != "" {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
		return nil, err
	}
	return r, nil
}

func convertMatch(m policyv1alpha1.Match, errs []error) (core.Match, []error) {
	out := core.Match{LabelSelector: m.LabelSelector}
	if len(m.GVK) == 0 {
		errs = append(errs, fieldErr("match.gvk", "match.gvk is required: list the kinds the rule applies to, e.g. {group: \"\", version: v1, kind: Pod}"))
	}
	for i, g := range m.GVK {
		if g.Kind == "" {
			errs = append(errs, fieldErr(fmt.Sprintf("match.gvk[%d]", i), "match.gvk[%d].kind is required", i))
		}
		if err := checkBuiltinGroup(i, g); err != nil {
			errs = append(errs, err)
		}
		if gk := (schema.GroupKind{Group: g.Group, Kind: g.Kind}); slices.Contains(OutputKinds, gk) {
			errs = append(errs, fieldErr(fmt.Sprintf("match.gvk[%d]", i), "match.gvk[%d]: %s is what Portal writes its findings to; a rule on it would rewrite the report it is reported in", i, flagKind(gk)))
		}
		out.GVKs = append(out.GVKs, core.GVK{Group: g.Group, Version: g.Version, Kind: g.Kind})
	}
	for i, op := range m.Operations {
		switch op {
		case "CREATE", "UPDATE", "DELETE", "CONNECT":
			if slices.Contains(out.Operations, string(op)) {
				errs = append(errs, fieldErr(fmt.Sprintf("match.operations[%d]", i), "match.operations[%d]: %q is listed twice", i, op))
			}
			out.Operations = append(out.Operations, string(op))
		default:
			errs = append(errs, fieldErr(fmt.Sprintf("match.operations[%d]", i), "match.operations[%d]: %q is not one of CREATE, UPDATE, DELETE, CONNECT", i, op))
		}
	}
	if m.Namespaces != nil {
		out.Namespaces = core.NamespaceMatch{Include: m.Namespaces.Include, Exclude: m.Namespaces.Exclude}
		errs = checkPatterns("match.namespaces.include", m.Namespaces.Include, errs)
		errs = checkPatterns("match.namespaces.exclude", m.Namespaces.Exclude, errs)
	}
	if len(m.GVK) > maxGVKs {
		errs = append(errs, fieldErr("match.gvk", "match.gvk has %d kinds, more than %d", len(m.GVK), maxGVKs))
	}
	for i, g := range m.GVK {
		if len(g.Group) > maxGroup || len(g.Version) > maxVersion || len(g.Kind) > maxKind {
			errs = append(errs, fieldErr(fmt.Sprintf("match.gvk[%d]", i), "match.gvk[%d]: group, version and kind may have at most %d, %d and %d characters", i, maxGroup, maxVersion, maxKind))
		}
	}
	return out, errs
}

// The bounds of a rule's match, as the CRD sets them: folder files do not
// pass the API server. A namespace pattern is at most a DNS subdomain long.
const (
	maxGVKs              = 32
	maxNamespacePatterns = 64
	maxPattern           = 253
	maxGroup             = 253
	maxVersion           = 63
	maxKind              = 63
)

// checkPatterns bounds one list of namespace names or globs.
func checkPatterns(field string, ps []string, errs []error) []error {
	if len(ps) > maxNamespacePatterns {
		errs = append(errs, fieldErr(field, "%s has %d entries, more than %d: use globs (team-*)", field, len(ps), maxNamespacePatterns))
	}
	for i, p := range ps {
		if len(p) > maxPattern {
			errs = append(errs, fieldErr(fmt.Sprintf("%s[%d]", field, i), "%s[%d] has %d characters, more than %d", field, i, len(p), maxPattern))
		}
	}
	return errs
}

func convertActions(spec *policyv1alpha1.RuleSpec, src core.Source, errs []error) ([]core.ActionSpec, []error) {
	var out []core.ActionSpec
	for i, a := range spec.Actions {
		if !slices.Contains(actions, a.Type) {
			errs = append(errs, fieldErr(fmt.Sprintf("actions[%d].type", i), "actions[%d].type %q is not one of %v%s", i, a.Type, actions, meant(a.Type, actions)))
			continue
		}
		errs = append(errs, checkAction(i, &a, src)...)
		as := core.ActionSpec{Type: a.Type, Params: map[string]string{}}
		as.Modes, errs = convertModes(fmt.Sprintf("actions[%d].mode", i), a.Mode, errs)
		if _, _, err := core.ParseRateLimit(a.RateLimit); a.RateLimit != "" && err != nil {
			errs = append(errs, fieldErr(fmt.Sprintf("actions[%d].rateLimit", i), "actions[%d].rateLimit %q: write COUNT/UNIT with UNIT s, min or h, e.g. 5/min", i, a.RateLimit))
		}
		for k, v := range map[string]string{"key": a.Key, "value": a.Value, "template": a.Template, "rateLimit": a.RateLimit,
			"dryRun": boolParam(a.DryRun), "keep": boolParam(a.Keep), "minHealthyReplicas": a.MinHealthyReplicas,
			"recreateServiceAccount": boolParam(a.RecreateServiceAccount)} {
			if v != "" {
				as.Params[k] = v
			}
		}
		out = append(out, as)
	}
	// The alert shorthand expands to an alertmanager action unless the rule
	// already lists one for the same template.
	if spec.Alert != "" && !slices.ContainsFunc(out, func(a core.ActionSpec) bool {
		return a.Type == "alertmanager" && a.Params["template"] == spec.Alert
	}) {
		out = append(out, core.ActionSpec{Type: "alertmanager", Params: map[string]string{"template": spec.Alert}})
	}
	return out, errs
}

// maxRuntimeEvents bounds runtime.events, as the CRD does.
const maxRuntimeEvents = 16

// convertRuntime checks the runtime block: required with mode runtime,
// refused without it, naming known event classes once each.
func convertRuntime(rt *policyv1alpha1.RuntimeSpec, runtime bool, errs []error) (core.RuntimeMatch, []error) {
	var out core.RuntimeMatch
	switch {
	case rt == nil && runtime:
		return out, append(errs, fieldErr("runtime", "runtime.events is required with mode runtime: list the event classes the rule sees, e.g. [exec] (one of %v)", event.Names()))
	case rt == nil:
		return out, errs
	case !runtime:
		return out, append(errs, fieldErr("runtime", "runtime is only read by rules of mode runtime: add runtime to mode or remove it"))
	case len(rt.Events) == 0:
		return out, append(errs, fieldErr("runtime.events", "runtime.events is empty: list at least one of %v", event.Names()))
	case len(rt.Events) > maxRuntimeEvents:
		return out, append(errs, fieldErr("runtime.events", "runtime.events lists %d classes, more than %d", len(rt.Events), maxRuntimeEvents))
	}
	for i, c := range rt.Events {
		at := fmt.Sprintf("runtime.events[%d]", i)
		switch {
		case !event.Known(string(c)):
			msg := fmt.Sprintf("%s: %q is not an event class (one of %v)", at, c, event.Names())
			if d := didyoumean.Closest(string(c), event.Names()); d != "" {
				msg = fmt.Sprintf("%s: %q is not an event class: did you mean %q? (one of %v)", at, c, d, event.Names())
			}
			errs = append(errs, fieldErr(at, "%s", msg))
		case slices.Contains(out.Events, string(c)):
			errs = append(errs, fieldErr(at, "%s: %q is listed twice", at, c))
		default:
			out.Events = append(out.Events, string(c))
		}
	}
	return out, errs
}

// convertModes checks a list of modes for unknown values and duplicates.
func convertModes(field string, in []policyv1alpha1.Mode, errs []error) ([]core.Mode, []error) {
	var out []core.Mode
	for i, m := range in {
		at := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case !slices.Contains(modes, core.Mode(m)):
			errs = append(errs, fieldErr(at, "%s: %q is not one of %v%s", field, m, modes, meant(core.Mode(m), modes)))
		case slices.Contains(out, core.Mode(m)):
			errs = append(errs, fieldErr(at, "%s: %q is listed twice", field, m))
		default:
			out = append(out, core.Mode(m))
		}
	}
	return out, errs
}

// meant is a ": did you mean X?" clause naming the value of set closest to
// a misspelt v, or "" when none is close.
func meant[T ~string](v T, set []T) string {
	names := make([]string, len(set))
	for i, x := range set {
		names[i] = string(x)
	}
	if d := didyoumean.Closest(string(v), names); d != "" {
		return fmt.Sprintf(": did you mean %q?", d)
	}
	return ""
}

// boolParam renders a boolean action parameter: "true", or nothing.
func boolParam(b bool) string {
	if b {
		return "true"
	}
	return ""
}

// ActionTypes lists the action types a rule may name: the actions
// registry's, written out because the rule loader sits below the layers and
// imports none; TestRuleLoaderKnowsTheRegistry keeps the two equal.
func ActionTypes() []string {
	return []string{"alertmanager", "annotate", "evict", "label", "patch-networkpolicy", "revoke-sa-token"}
}

// TenantKeyPrefix is core.TenantKeyPrefix.
const TenantKeyPrefix = core.TenantKeyPrefix

// checkAction mirrors the CRD's validation of one action for every source
// (folder files do not pass the API server), and adds what only Portal
// knows: the source's kind.
func checkAction(i int, a *policyv1alpha1.Action, src core.Source) []error {
	var errs []error
	at := func(f string) string { return fmt.Sprintf("actions[%d].%s", i, f) }
	only := func(field, set string, types ...string) {
		if set != "" && !slices.Contains(types, a.Type) {
			errs = append(errs, fieldErr(at(field), "%s is only read by %v, not by %s: remove it", at(field), types, a.Type))
		}
	}
	only("key", a.Key, "label", "annotate")
	only("value", a.Value, "label", "annotate")
	only("template", a.Template, "alertmanager")
	only("keep", boolParam(a.Keep), "label", "annotate", "patch-networkpolicy")
	only("minHealthyReplicas", a.MinHealthyReplicas, "evict")
	only("recreateServiceAccount", boolParam(a.RecreateServiceAccount), "revoke-sa-token")
	switch a.Type {
	case "label", "annotate":
		if msgs := validation.IsQualifiedName(a.Key); len(msgs) > 0 {
			errs = append(errs, fieldErr(at("key"), "%s %q: %s", at("key"), a.Key, strings.Join(msgs, "; ")))
		}
		if a.Type == "label" {
			if msgs := validation.IsValidLabelValue(a.Value); len(msgs) > 0 {
				errs = append(errs, fieldErr(at("value"), "%s %q: %s", at("value"), a.Value, strings.Join(msgs, "; ")))
			}
		}
		if src.Kind == "PortalRule" && !strings.HasPrefix(a.Key, TenantKeyPrefix) {
			errs = append(errs, fieldErr(at("key"), "%s %q: a PortalRule may only set keys under %s (for example %squarantine)", at("key"), a.Key, TenantKeyPrefix, TenantKeyPrefix))
		}
	case "alertmanager":
		if a.Template == "" {
			errs = append(errs, fieldErr(at("template"), "%s is required for alertmanager: the alertname of the alerts", at("template")))
		}
		if len(a.Template) > maxAlertName {
			errs = append(errs, fieldErr(at("template"), "%s is %d characters, more than %d: it is the alertname of the alerts", at("template"), len(a.Template), maxAlertName))
		}
	}
	if a.MinHealthyReplicas != "" && !minHealthy.MatchString(a.MinHealthyReplicas) {
		errs = append(errs, fieldErr(at("minHealthyReplicas"), "%s %q: write a count (2) or a percentage (50%%)", at("minHealthyReplicas"), a.MinHealthyReplicas))
	}
	return errs
}
