package rule

import (
	"errors"
	"fmt"
	"golang.org/x/time/rate"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// A PortalRule is written by a tenant, who may be hostile. The kinds below
// are ones a tenant's rule must not reach by default; PortalClusterRules and
// rule files, written by the platform team, may match all of them.

// secretKind is the kind a PortalRule can never match: whoever may write
// PortalRules in a namespace would learn, from which writes are denied (or
// which budget ran out), a bit of every Secret written there per rule, without
// the right to read Secrets. The CRD refuses it too; this covers rules that
// reach the loader some other way (an API server without CEL validation, a
// CRD not yet upgraded).
var secretKind = schema.GroupKind{Kind: "Secret"}

// HighRateKinds are the kinds controllers write many times a second
// cluster-wide (leader-election renewals, events, endpoint updates) or that
// every authenticated request may create (the review APIs). A tenant's rule
// on one of them would put every such write in its namespace behind Portal's
// fail-closed webhook and its evaluation budget, so PortalRules may only
// match them when the operator allows it with --allow-tenant-kinds. This is
// the one list of them; docs/reference/cli.md describes it.
var HighRateKinds = []schema.GroupKind{
	{Group: "coordination.k8s.io", Kind: "Lease"},
	{Group: "", Kind: "Event"},
	{Group: "events.k8s.io", Kind: "Event"},
	{Group: "discovery.k8s.io", Kind: "EndpointSlice"},
	{Group: "", Kind: "Endpoints"},
	{Group: "authentication.k8s.io", Kind: "TokenReview"},
	{Group: "authentication.k8s.io", Kind: "SelfSubjectReview"},
	{Group: "authorization.k8s.io", Kind: "SubjectAccessReview"},
	{Group: "authorization.k8s.io", Kind: "LocalSubjectAccessReview"},
	{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"},
	{Group: "authorization.k8s.io", Kind: "SelfSubjectRulesReview"},
}

// ClusterScopedKinds are the well-known cluster-scoped kinds. A PortalRule
// only matches objects in its own namespace, so one that names such a kind
// would load and never apply; the CRD's CEL rule refuses exactly these (a
// test keeps the two lists equal), and the loader asks the API server's
// discovery about every other kind.
var ClusterScopedKinds = []schema.GroupKind{
	{Kind: "Namespace"}, {Kind: "Node"}, {Kind: "PersistentVolume"}, {Kind: "ComponentStatus"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"},
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"},
	{Group: "storage.k8s.io", Kind: "StorageClass"},
	{Group: "storage.k8s.io", Kind: "CSIDriver"},
	{Group: "storage.k8s.io", Kind: "CSINode"},
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"},
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"},
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"},
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"},
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"},
	{Group: "networking.k8s.io", Kind: "IngressClass"},
	{Group: "node.k8s.io", Kind: "RuntimeClass"},
	{Group: "apiregistration.k8s.io", Kind: "APIService"},
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"},
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"},
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"},
	{Group: "portal.io", Kind: "PortalClusterRule"},
	{Group: "gateway.networking.k8s.io", Kind: "GatewayClass"},
}

// ParseTenantKinds reads the values of --allow-tenant-kinds, each Kind.group
// ("Lease.coordination.k8s.io") or a core Kind ("Event"). Only kinds of
// HighRateKinds may be named: any other is already allowed, and a typo must
// not pass silently.
func ParseTenantKinds(values []string) ([]schema.GroupKind, error) {
	var out []schema.GroupKind
	var errs []error
	for _, v := range values {
		gk := schema.ParseGroupKind(strings.TrimSpace(v))
		switch {
		case gk == secretKind:
			errs = append(errs, fmt.Errorf("%q: PortalRules can never match Secrets; use a PortalClusterRule", v))
		case !slices.Contains(HighRateKinds, gk):
			errs = append(errs, fmt.Errorf("%q is not one of the kinds PortalRules are refused (%s)", v, describeKinds(HighRateKinds)))
		case !slices.Contains(out, gk):
			out = append(out, gk)
		}
	}
	return out, errors.Join(errs...)
}

// describeKinds lists kinds as the flag takes them.
func describeKinds(kinds []schema.GroupKind) string {
	s := make([]string, len(kinds))
	for i, gk := range kinds {
		s[i] = flagKind(gk)
	}
	return strings.Join(s, ", ")
}

// flagKind writes a kind as --allow-tenant-kinds takes it.
func flagKind(gk schema.GroupKind) string {
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}

// TenantKindError is a PortalRule matching a kind tenants may not match.
// Its Reason goes into the Ready condition, so `kubectl get` shows what to
// fix without reading the message.
type TenantKindError struct {
	Field string
	Kind  schema.GroupKind
	// ClusterScoped: the kind has no namespace, so the rule could never
	// match an object.
	ClusterScoped bool
}

func (e *TenantKindError) Error() string {
	if e.ClusterScoped {
		return fmt.Sprintf("%s: %s is cluster-scoped, and a PortalRule only matches objects in its own namespace, so the rule would never apply; use a PortalClusterRule",
			e.Field, flagKind(e.Kind))
	}
	if e.Kind == secretKind {
		return fmt.Sprintf("%s: PortalRules cannot match Secrets; a PortalClusterRule can", e.Field)
	}
	return fmt.Sprintf("%s: PortalRules cannot match %s, which controllers write at a high rate, unless Portal runs with --allow-tenant-kinds=%s; a PortalClusterRule can",
		e.Field, flagKind(e.Kind), flagKind(e.Kind))
}

// Reason is the Ready condition's reason for the error.
func (e *TenantKindError) Reason() string {
	if e.ClusterScoped {
		return policyv1alpha1.ReasonClusterScopedKind
	}
	if e.Kind == secretKind {
		return policyv1alpha1.ReasonSecretNotAllowed
	}
	return policyv1alpha1.ReasonHighRateKindNotAllowed
}

// checkTenantKinds refuses the kinds of a PortalRule's match that tenants may
// not match: Secrets always, HighRateKinds unless allowed lists them, and
// cluster-scoped kinds (ClusterScopedKinds, or any kind clusterScoped says
// is one), which it could never apply to.
func checkTenantKinds(m policyv1alpha1.Match, allowed []schema.GroupKind, clusterScoped func(schema.GroupKind) bool) []error {
	var errs []error
	for i, g := range m.GVK {
		gk := schema.GroupKind{Group: g.Group, Kind: g.Kind}
		field := fmt.Sprintf("match.gvk[%d]", i)
		switch {
		case slices.Contains(ClusterScopedKinds, gk) || (clusterScoped != nil && clusterScoped(gk)):
			errs = append(errs, &FieldError{Field: field, Err: &TenantKindError{Field: field, Kind: gk, ClusterScoped: true}})
		case gk == secretKind || (slices.Contains(HighRateKinds, gk) && !slices.Contains(allowed, gk)):
			errs = append(errs, &FieldError{Field: field, Err: &TenantKindError{Field: field, Kind: gk}})
		}
	}
	return errs
}

// clusterScopedIn returns a check that asks mapper (the API server's
// discovery, cached) whether a kind is cluster-scoped. A kind the API
// server does not serve is not refused: its CRD may come later. A kind the
// mapper does not know makes it read discovery again, and a tenant can
// name 32 new ones per edit, so asks beyond asks' rate are not made (the
// kind is not refused, and the rule simply never matches).
func clusterScopedIn(mapper meta.RESTMapper, asks *rate.Limiter) func(schema.GroupKind) bool {
	if mapper == nil {
		return nil
	}
	return func(gk schema.GroupKind) bool {
		if asks != nil && !asks.Allow() {
			return false
		}
		m, err := mapper.RESTMapping(gk)
		return err == nil && m.Scope.Name() == meta.RESTScopeNameRoot
	}
}
