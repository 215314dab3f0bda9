// Package binding attaches WAF rule sets to Gateway API Gateways and Routes
// (WAFGatewayBindingPolicy, inherited attachment) and lets application
// teams tune them on their own routes (RuleSetOverride). It computes, for
// every Gateway, the route table the rule set cache serves its data planes,
// and writes the policies' status and the PolicyAffected condition on the
// Gateways and Routes they affect.
//
// Resolve is a pure function of a Snapshot of the cluster; the controller
// takes the snapshot from its informers, puts the tables in the cache and
// writes what Resolve said.
package binding

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

// Kinds a policy targets.
const (
	KindGateway   = "Gateway"
	KindHTTPRoute = "HTTPRoute"
	KindGRPCRoute = "GRPCRoute"
)

// Snapshot is what Resolve reads: every object of the kinds involved.
type Snapshot struct {
	Gateways   []*gatewayv1.Gateway
	HTTPRoutes []*gatewayv1.HTTPRoute
	GRPCRoutes []*gatewayv1.GRPCRoute
	Policies   []*wafv1alpha1.WAFGatewayBindingPolicy
	Overrides  []*wafv1alpha1.RuleSetOverride
	Grants     []*gatewayv1.ReferenceGrant
	RuleSets   []*wafv1alpha1.RuleSet
	// NamespaceLabels are the labels of each namespace, for listeners that
	// admit routes by namespace selector.
	NamespaceLabels map[string]map[string]string
	// Revision returns the latest cached revision of a rule set
	// (namespace/name); ok is false while it has none.
	Revision func(key string) (uuid string, ok bool)
	// Bundles resolves spec.bundle; nil when bundle storage is not
	// configured.
	Bundles BundleFetcher
}

// BundleFetcher is what a policy's spec.bundle needs of bundle storage: the
// rule set key the fetched, verified bundle is cached under and its
// revision, or the reason it is not available.
type BundleFetcher interface {
	// Bundle returns the rule set in the cache that policy's bundle at
	// location with digest sha256 resolved to, ok true while one is
	// enforced; reason and message, when set, say why it is not the one
	// asked for (StaleBundle: the last good one stays) or, with ok false,
	// why there is none (FetchError, IntegrityError, ...: a cold miss).
	// It must not block: a fetch runs in the background.
	Bundle(policy types.NamespacedName, location, sha256 string) (rs cache.TableRuleSet, ok bool, reason, message string)
	// Retain is told, after every table computation, the spec.bundle of
	// every policy that has one: a bundle no policy uses any more is
	// deleted (rule set cache, memory, persisted last good store).
	Retain(policies map[types.NamespacedName]wafv1alpha1.BundleReference)
}

// objKey names an object of a kind: Kind/namespace/name.
type objKey struct {
	Kind      string
	Namespace string
	Name      string
}

func (k objKey) String() string { return k.Kind + "/" + k.Namespace + "/" + k.Name }

func (k objKey) nn() types.NamespacedName {
	return types.NamespacedName{Namespace: k.Namespace, Name: k.Name}
}

// route is an HTTPRoute or GRPCRoute as far as attachment and tables care.
type route struct {
	key       objKey
	created   metav1.Time
	hostnames []string
	rows      []cache.TableRow // without Policy
	parents   []objKey         // Gateways it is attached to
	// hosts are the hostnames it serves on each parent ("" alone: any).
	hosts map[objKey][]string
	// insts are the regular expression instructions of its rows;
	// unsupported, when set, names a match no data plane runs.
	insts       int
	unsupported error
}

// resolvedSource is what a policy's rule source resolved to.
type resolvedSource struct {
	ruleSet   *cache.TableRuleSet
	perms     *wafv1alpha1.OverridePermissions
	resolved  bool // ResolvedRefs
	reason    string
	message   string
	available bool // the data plane can run it (Programmed, unless a table fails)
}

// policyState is a policy and what became of it.
type policyState struct {
	p       *wafv1alpha1.WAFGatewayBindingPolicy
	key     types.NamespacedName
	invalid string
	source  resolvedSource
	// targets, in spec order, with their Accepted outcome.
	targets []targetState
}

type targetState struct {
	key     objKey
	reason  string // Accepted, TargetNotFound, Conflicted, Invalid
	message string
}

func (t targetState) accepted() bool { return t.reason == string(gatewayv1.PolicyReasonAccepted) }

// Result is what Resolve made of a Snapshot.
type Result struct {
	// Tables is the route table of every Gateway.
	Tables map[types.NamespacedName]*cache.Table
	// Policies and Overrides are the statuses to write, by object.
	Policies  map[types.NamespacedName]PolicyOutcome
	Overrides map[types.NamespacedName]wafv1alpha1.RuleSetOverrideStatus
	// AffectedGateways maps each Gateway a policy affects to that policy.
	AffectedGateways map[types.NamespacedName]string
	// AffectedRoutes maps each Route (Kind/namespace/name) to the policy
	// affecting it through each of its Gateways.
	AffectedRoutes map[string]map[types.NamespacedName]string
	// LeftOut maps each Route (Kind/namespace/name) left out of a
	// Gateway's table to that Gateway and why.
	LeftOut map[string]map[types.NamespacedName]LeftOut
}

// PolicyOutcome is a policy's status before the tables are served: the
// controller completes Programmed with the outcome of serving them.
type PolicyOutcome struct {
	Generation int64
	Targets    []TargetOutcome
	RuleSet    *wafv1alpha1.EffectiveRuleSet
	// Resolved, Reason, Message: the ResolvedRefs condition.
	Resolved        bool
	Reason, Message string
	// Available is false when the data plane cannot run the rule source
	// (Programmed=False with ProgramReason).
	Available                     bool
	ProgramReason, ProgramMessage string
}

// TargetOutcome is one ancestor of a policy.
type TargetOutcome struct {
	Ref      gatewayv1.ParentReference
	Accepted bool
	Reason   string
	Message  string
	// Gateways are the Gateways whose tables carry the policy for this
	// target.
	Gateways []types.NamespacedName
	// LeftOut are the Gateways whose tables leave the target route out,
	// and why.
	LeftOut map[types.NamespacedName]LeftOut
}

// Resolve computes tables and statuses from s.
func Resolve(s *Snapshot) *Result {
	res := &Result{
		Tables:           map[types.NamespacedName]*cache.Table{},
		Policies:         map[types.NamespacedName]PolicyOutcome{},
		Overrides:        map[types.NamespacedName]wafv1alpha1.RuleSetOverrideStatus{},
		AffectedGateways: map[types.NamespacedName]string{},
		AffectedRoutes:   map[string]map[types.NamespacedName]string{},
		LeftOut:          map[string]map[types.NamespacedName]LeftOut{},
	}
	gateways := map[objKey]*gatewayv1.Gateway{}
	for _, g := range s.Gateways {
		gateways[objKey{KindGateway, g.Namespace, g.Name}] = g
	}
	routes := map[objKey]*route{}
	for _, r := range s.HTTPRoutes {
		rt := httpRoute(r)
		a := attachRoute(KindHTTPRoute, r.Namespace, rt.hostnames, r.Spec.ParentRefs, gateways, s.NamespaceLabels)
		rt.parents, rt.hosts = a.parents, a.hosts
		routes[rt.key] = rt
	}
	for _, r := range s.GRPCRoutes {
		rt := grpcRoute(r)
		a := attachRoute(KindGRPCRoute, r.Namespace, rt.hostnames, r.Spec.ParentRefs, gateways, s.NamespaceLabels)
		rt.parents, rt.hosts = a.parents, a.hosts
		routes[rt.key] = rt
	}
	ruleSets := map[string]*wafv1alpha1.RuleSet{}
	for _, rs := range s.RuleSets {
		ruleSets[cache.Key(rs.Namespace, rs.Name)] = rs
	}

	states := make([]*policyState, 0, len(s.Policies))
	for _, p := range s.Policies {
		st := &policyState{p: p, key: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}}
		st.invalid = validatePolicy(p)
		if st.invalid == "" {
			st.source = resolveSource(s, p, ruleSets)
		}
		states = append(states, st)
	}
	winners := attach(states, gateways, routes)
	overrides := resolveOverrides(s.Overrides, routes, winners, states, res)
	// Index routes by Gateway once: scanning every route for every
	// Gateway is quadratic in the size of the cluster.
	attached := map[objKey][]*route{}
	for _, r := range routes {
		for _, p := range r.parents {
			attached[p] = append(attached[p], r)
		}
	}
	for gk, g := range gateways {
		t, left := buildTable(g, gk, attached[gk], winners, overrides)
		res.Tables[gk.nn()] = t
		for rk, why := range left {
			if res.LeftOut[rk.String()] == nil {
				res.LeftOut[rk.String()] = map[types.NamespacedName]LeftOut{}
			}
			res.LeftOut[rk.String()][gk.nn()] = why
		}
	}
	for _, st := range states {
		res.Policies[st.key] = outcome(st, routes, res.LeftOut)
	}
	affected(res, gateways, routes, winners)
	return res
}

// validatePolicy repeats what the CRD's validation says, for objects
// stored before it or written around it; empty when valid.
func validatePolicy(p *wafv1alpha1.WAFGatewayBindingPolicy) string {
	sp := p.Spec
	switch {
	case (sp.RuleSet == nil) == (sp.Bundle == nil):
		return "exactly one of spec.ruleSet and spec.bundle is required"
	case len(sp.TargetRefs) == 0 || len(sp.TargetRefs) > wafv1alpha1.MaxPolicyTargets:
		return fmt.Sprintf("spec.targetRefs must hold 1 to %d targets", wafv1alpha1.MaxPolicyTargets)
	}
	kind := string(sp.TargetRefs[0].Kind)
	for _, t := range sp.TargetRefs {
		if string(t.Group) != gatewayv1.GroupName || !slices.Contains([]string{KindGateway, KindHTTPRoute, KindGRPCRoute}, string(t.Kind)) {
			return fmt.Sprintf("spec.targetRefs: %s %s is not a Gateway, HTTPRoute or GRPCRoute of %s", t.Group, t.Kind, gatewayv1.GroupName)
		}
		if string(t.Kind) != kind {
			return "spec.targetRefs must all be of one kind"
		}
	}
	return ""
}

// resolveSource resolves spec.ruleSet (with its ReferenceGrant) or
// spec.bundle.
func resolveSource(s *Snapshot, p *wafv1alpha1.WAFGatewayBindingPolicy, ruleSets map[string]*wafv1alpha1.RuleSet) resolvedSource {
	if b := p.Spec.Bundle; b != nil {
		if s.Bundles == nil {
			return resolvedSource{resolved: true, reason: wafv1alpha1.ReasonFetchError,
				message: "bundle storage not configured: start Portal with --bundle-storage-url to use spec.bundle"}
		}
		rs, ok, reason, msg := s.Bundles.Bundle(types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, b.Location, b.SHA256)
		if !ok {
			return resolvedSource{resolved: true, reason: cmp.Or(reason, wafv1alpha1.ReasonFetchError), message: msg}
		}
		return resolvedSource{ruleSet: &rs, resolved: true, available: true, reason: reason, message: msg}
	}
	ref := p.Spec.RuleSet
	ns := cmp.Or(ref.Namespace, p.Namespace)
	key := cache.Key(ns, ref.Name)
	if ns != p.Namespace && !granted(s.Grants, p.Namespace, ns, ref.Name) {
		return resolvedSource{reason: wafv1alpha1.ReasonRefNotPermitted,
			message: fmt.Sprintf("RuleSet %s is in another namespace and no ReferenceGrant in %s allows WAFGatewayBindingPolicies of %s to reference it", key, ns, p.Namespace)}
	}
	rs, ok := ruleSets[key]
	if !ok {
		return resolvedSource{reason: wafv1alpha1.ReasonInvalidRef, message: fmt.Sprintf("RuleSet %s not found", key)}
	}
	uuid, ok := "", false
	if s.Revision != nil {
		uuid, ok = s.Revision(key)
	}
	if !ok {
		return resolvedSource{reason: wafv1alpha1.ReasonInvalidRef, perms: rs.Spec.Overrides,
			message: fmt.Sprintf("RuleSet %s has no compiled revision in the cache (see its status)", key)}
	}
	return resolvedSource{ruleSet: &cache.TableRuleSet{Namespace: ns, Name: ref.Name, UUID: uuid}, perms: rs.Spec.Overrides,
		resolved: true, available: true}
}

// granted reports whether a ReferenceGrant in toNS lets
// WAFGatewayBindingPolicies of fromNS reference RuleSet name.
func granted(grants []*gatewayv1.ReferenceGrant, fromNS, toNS, name string) bool {
	for _, g := range grants {
		if g.Namespace != toNS {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gatewayv1.ReferenceGrantFrom) bool {
			return string(f.Group) == wafv1alpha1.GroupVersion.Group && f.Kind == "WAFGatewayBindingPolicy" && string(f.Namespace) == fromNS
		})
		to := slices.ContainsFunc(g.Spec.To, func(t gatewayv1.ReferenceGrantTo) bool {
			return string(t.Group) == wafv1alpha1.GroupVersion.Group && t.Kind == "RuleSet" && (t.Name == nil || string(*t.Name) == name)
		})
		if from && to {
			return true
		}
	}
	return false
}

// older orders policies for conflicts: oldest first, then namespace/name.
func older(a, b metav1.ObjectMeta) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// attach decides each target's Accepted outcome and returns the winning
// policy of every targeted object.
func attach(states []*policyState, gateways map[objKey]*gatewayv1.Gateway, routes map[objKey]*route) map[objKey]*policyState {
	slices.SortFunc(states, func(a, b *policyState) int { return older(a.p.ObjectMeta, b.p.ObjectMeta) })
	winners := map[objKey]*policyState{}
	for _, st := range states {
		for _, t := range st.p.Spec.TargetRefs {
			k := objKey{string(t.Kind), st.p.Namespace, string(t.Name)}
			ts := targetState{key: k, reason: string(gatewayv1.PolicyReasonAccepted), message: "The Policy is accepted"}
			_, isGW := gateways[k]
			_, isRoute := routes[k]
			switch w := winners[k]; {
			case st.invalid != "":
				ts.reason, ts.message = string(gatewayv1.PolicyReasonInvalid), st.invalid
			case !isGW && !isRoute:
				ts.reason, ts.message = string(gatewayv1.PolicyReasonTargetNotFound), fmt.Sprintf("%s %s not found in namespace %s", k.Kind, k.Name, k.Namespace)
			case w != nil:
				ts.reason, ts.message = string(gatewayv1.PolicyReasonConflicted),
					fmt.Sprintf("WAFGatewayBindingPolicy %s, older, already targets this %s", w.key, k.Kind)
			default:
				winners[k] = st
			}
			st.targets = append(st.targets, ts)
		}
	}
	return winners
}

// effective returns the policy a route runs behind Gateway gw: its own
// (Route-level) when it has one, else the Gateway's.
func effective(rk objKey, gw objKey, winners map[objKey]*policyState) (st *policyState, inherited bool) {
	if st := winners[rk]; st != nil {
		return st, false
	}
	if st := winners[gw]; st != nil {
		return st, true
	}
	return nil, false
}

// outcome is a policy's status before the tables are served.
func outcome(st *policyState, routes map[objKey]*route, leftOut map[string]map[types.NamespacedName]LeftOut) PolicyOutcome {
	o := PolicyOutcome{Generation: st.p.Generation, Resolved: st.source.resolved, Reason: st.source.reason, Message: st.source.message,
		Available: st.source.available}
	switch {
	case st.invalid != "":
		o.Resolved, o.Reason, o.Message = false, string(gatewayv1.PolicyReasonInvalid), st.invalid
		o.ProgramReason, o.ProgramMessage = wafv1alpha1.ReasonPending, "The policy is invalid: "+st.invalid
	case o.Resolved:
		// The references resolved; a bundle may still be unavailable
		// (its reason is Programmed's, FetchError or IntegrityError).
		o.ProgramReason, o.ProgramMessage = st.source.reason, st.source.message
		o.Reason, o.Message = wafv1alpha1.ReasonResolvedRefs, "All references are resolved"
	default:
		o.ProgramReason, o.ProgramMessage = wafv1alpha1.ReasonPending, "The rule set reference does not resolve: "+st.source.message
	}
	if rs := st.source.ruleSet; rs != nil {
		o.RuleSet = &wafv1alpha1.EffectiveRuleSet{Namespace: rs.Namespace, Name: rs.Name, Revision: rs.UUID}
	} else if ref := st.p.Spec.RuleSet; ref != nil {
		o.RuleSet = &wafv1alpha1.EffectiveRuleSet{Namespace: cmp.Or(ref.Namespace, st.p.Namespace), Name: ref.Name}
	}
	for _, t := range st.targets {
		group := gatewayv1.Group(gatewayv1.GroupName)
		kind := gatewayv1.Kind(t.key.Kind)
		ns := gatewayv1.Namespace(t.key.Namespace)
		to := TargetOutcome{
			Ref:      gatewayv1.ParentReference{Group: &group, Kind: &kind, Namespace: &ns, Name: gatewayv1.ObjectName(t.key.Name)},
			Accepted: t.accepted(), Reason: t.reason, Message: t.message,
		}
		if to.Accepted {
			if t.key.Kind == KindGateway {
				to.Gateways = []types.NamespacedName{t.key.nn()}
			} else if r := routes[t.key]; r != nil {
				for _, p := range r.parents {
					to.Gateways = append(to.Gateways, p.nn())
				}
				to.LeftOut = leftOut[t.key.String()]
			}
		}
		o.Targets = append(o.Targets, to)
	}
	return o
}

// affected fills the PolicyAffected maps: every Gateway with an accepted
// Gateway-level policy, and every Route behind a Gateway that runs a
// policy for it, unless that Gateway's table leaves the Route out.
func affected(res *Result, gateways map[objKey]*gatewayv1.Gateway, routes map[objKey]*route, winners map[objKey]*policyState) {
	for gk := range gateways {
		if st := winners[gk]; st != nil {
			res.AffectedGateways[gk.nn()] = st.key.String()
		}
	}
	for rk, r := range routes {
		for _, gw := range r.parents {
			if _, left := res.LeftOut[rk.String()][gw.nn()]; left {
				continue
			}
			if st, _ := effective(rk, gw, winners); st != nil {
				m := res.AffectedRoutes[rk.String()]
				if m == nil {
					m = map[types.NamespacedName]string{}
					res.AffectedRoutes[rk.String()] = m
				}
				m[gw.nn()] = st.key.String()
			}
		}
	}
}
