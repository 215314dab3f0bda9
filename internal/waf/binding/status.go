package binding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1ac "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// MaxRouteParents is the most status.parents a Route holds (Gateway API's
// bound); Portal adds its entries only while there is room.
const MaxRouteParents = 32

// mergeConditions returns old with desired set in it (transition times
// kept when the status did not change) and every other type removed.
func mergeConditions(old []metav1.Condition, desired ...metav1.Condition) []metav1.Condition {
	out := slices.Clone(old)
	out = slices.DeleteFunc(out, func(c metav1.Condition) bool {
		return !slices.ContainsFunc(desired, func(d metav1.Condition) bool { return d.Type == c.Type })
	})
	for _, d := range desired {
		meta.SetStatusCondition(&out, d)
	}
	slices.SortFunc(out, func(a, b metav1.Condition) int {
		return slices.IndexFunc(desired, func(d metav1.Condition) bool { return d.Type == a.Type }) -
			slices.IndexFunc(desired, func(d metav1.Condition) bool { return d.Type == b.Type })
	})
	return out
}

// policyStatus is the status of a policy from its outcome and the tables
// that could not be served.
func policyStatus(old wafv1alpha1.WAFGatewayBindingPolicyStatus, o PolicyOutcome, putErrs map[types.NamespacedName]error) wafv1alpha1.WAFGatewayBindingPolicyStatus {
	st := wafv1alpha1.WAFGatewayBindingPolicyStatus{ObservedGeneration: o.Generation, RuleSet: o.RuleSet}
	for _, t := range o.Targets {
		accepted := metaCondition(string(gatewayv1.PolicyConditionAccepted), t.Accepted, t.Reason, t.Message, o.Generation)
		resolved := metaCondition(wafv1alpha1.ConditionResolvedRefs, o.Resolved, o.Reason, o.Message, o.Generation)
		programmed := programmedCondition(o, t, putErrs)
		var prev []metav1.Condition
		for _, a := range old.Ancestors {
			if equality.Semantic.DeepEqual(a.AncestorRef, t.Ref) && a.ControllerName == wafv1alpha1.BindingControllerName {
				prev = a.Conditions
			}
		}
		st.Ancestors = append(st.Ancestors, gatewayv1.PolicyAncestorStatus{
			AncestorRef: t.Ref, ControllerName: wafv1alpha1.BindingControllerName,
			Conditions: mergeConditions(prev, accepted, resolved, programmed),
		})
	}
	return st
}

func programmedCondition(o PolicyOutcome, t TargetOutcome, putErrs map[types.NamespacedName]error) metav1.Condition {
	cond := func(ok bool, reason, msg string) metav1.Condition {
		return metaCondition(wafv1alpha1.ConditionProgrammed, ok, reason, msg, o.Generation)
	}
	switch {
	case !t.Accepted:
		return cond(false, wafv1alpha1.ReasonPending, "The policy is not accepted for this target")
	case !o.Available:
		return cond(false, o.ProgramReason, o.ProgramMessage)
	case len(t.Gateways) == 0:
		return cond(false, wafv1alpha1.ReasonPending, "The route is not attached to any Gateway")
	}
	var names []string
	for _, gw := range t.Gateways {
		if err := putErrs[gw]; err != nil {
			return cond(false, wafv1alpha1.ReasonDeploymentError, fmt.Sprintf("The route table of Gateway %s is not served: %v", gw, err))
		}
		if why, ok := t.LeftOut[gw]; ok {
			return cond(false, why.Reason, why.Message)
		}
		names = append(names, gw.String())
	}
	if o.ProgramReason != "" {
		// Enforced, but not what was asked for (a stale bundle).
		return cond(false, o.ProgramReason, o.ProgramMessage)
	}
	return cond(true, wafv1alpha1.ReasonProgrammed, "Policy successfully deployed to Gateway "+strings.Join(names, ", "))
}

func (c *Controller) writePolicies(ctx context.Context, res *Result, putErrs map[types.NamespacedName]error) error {
	var errs []error
	for key, o := range res.Policies {
		var p wafv1alpha1.WAFGatewayBindingPolicy
		if err := c.reader.Get(ctx, key, &p); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		st := policyStatus(p.Status, o, putErrs)
		if equality.Semantic.DeepEqual(st, p.Status) {
			continue
		}
		p.Status = st
		if err := c.client.Status().Update(ctx, &p); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("status of WAFGatewayBindingPolicy %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) writeOverrides(ctx context.Context, res *Result) error {
	var errs []error
	for key, st := range res.Overrides {
		var o wafv1alpha1.RuleSetOverride
		if err := c.reader.Get(ctx, key, &o); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		st.Conditions = mergeConditions(o.Status.Conditions, st.Conditions...)
		if equality.Semantic.DeepEqual(st, o.Status) {
			continue
		}
		o.Status = st
		if err := c.client.Status().Update(ctx, &o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("status of RuleSetOverride %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// writeGateways sets the PolicyAffected condition on the Gateways a policy
// affects and removes it from the others, by server-side apply of that one
// condition: the conditions of the Gateway's own controller are untouched.
func (c *Controller) writeGateways(ctx context.Context, snap *Snapshot, res *Result) error {
	var errs []error
	for _, g := range snap.Gateways {
		key := nn(g.Namespace, g.Name)
		policy, affected := res.AffectedGateways[key]
		cur := meta.FindStatusCondition(g.Status.Conditions, wafv1alpha1.ConditionPolicyAffected)
		want := metaCondition(wafv1alpha1.ConditionPolicyAffected, true, wafv1alpha1.ReasonPolicyAffected,
			"Gateway protected by WAFGatewayBindingPolicy "+policy, g.Generation)
		switch {
		case !affected && cur == nil:
			continue
		case affected && cur != nil && cur.Status == want.Status && cur.Message == want.Message && cur.ObservedGeneration == want.ObservedGeneration:
			continue
		}
		status := gatewayv1ac.GatewayStatus()
		if affected {
			ltt := metav1.Now()
			if cur != nil && cur.Status == want.Status {
				ltt = cur.LastTransitionTime
			}
			status.WithConditions(metav1ac.Condition().WithType(want.Type).WithStatus(want.Status).WithReason(want.Reason).
				WithMessage(want.Message).WithObservedGeneration(want.ObservedGeneration).WithLastTransitionTime(ltt))
		}
		ac := gatewayv1ac.Gateway(g.Name, g.Namespace).WithStatus(status)
		if err := c.client.Status().Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("PolicyAffected condition of Gateway %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// routeObject is an HTTPRoute or GRPCRoute with its status parents.
type routeObject struct {
	obj     client.Object
	kind    string
	parents *[]gatewayv1.RouteParentStatus
}

// writeRoutes keeps one status.parents entry per Gateway, with Portal's
// controllerName and the PolicyAffected condition, on every Route a policy
// affects, or the RouteTableAccepted=False condition where a Gateway's
// table leaves the Route out, and none on the others. status.parents is an atomic list, so
// this is an update of the Route as read (optimistic concurrency) that
// keeps the entries of every other controller.
func (c *Controller) writeRoutes(ctx context.Context, snap *Snapshot, res *Result) error {
	var objs []routeObject
	for _, r := range snap.HTTPRoutes {
		objs = append(objs, routeObject{r, KindHTTPRoute, &r.Status.Parents})
	}
	for _, r := range snap.GRPCRoutes {
		objs = append(objs, routeObject{r, KindGRPCRoute, &r.Status.Parents})
	}
	var errs []error
	for _, r := range objs {
		key := objKey{r.kind, r.obj.GetNamespace(), r.obj.GetName()}
		want := desiredParents(*r.parents, res.AffectedRoutes[key.String()], res.LeftOut[key.String()], r.obj.GetGeneration())
		if equality.Semantic.DeepEqual(want, *r.parents) {
			continue
		}
		*r.parents = want
		if err := c.client.Status().Update(ctx, r.obj); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("PolicyAffected condition of %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// desiredParents is parents with Portal's entries replaced by one per
// Gateway in affected or leftOut, while there is room.
func desiredParents(parents []gatewayv1.RouteParentStatus, affected map[types.NamespacedName]string,
	leftOut map[types.NamespacedName]LeftOut, gen int64) []gatewayv1.RouteParentStatus {
	ours := func(p gatewayv1.RouteParentStatus) bool { return p.ControllerName == wafv1alpha1.BindingControllerName }
	out := slices.DeleteFunc(slices.Clone(parents), ours)
	gws := make([]types.NamespacedName, 0, len(affected)+len(leftOut))
	for gw := range affected {
		gws = append(gws, gw)
	}
	for gw := range leftOut {
		if _, ok := affected[gw]; !ok {
			gws = append(gws, gw)
		}
	}
	slices.SortFunc(gws, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	for _, gw := range gws {
		if len(out) >= MaxRouteParents {
			break
		}
		group, kind, ns := gatewayv1.Group(gatewayv1.GroupName), gatewayv1.Kind(KindGateway), gatewayv1.Namespace(gw.Namespace)
		ref := gatewayv1.ParentReference{Group: &group, Kind: &kind, Namespace: &ns, Name: gatewayv1.ObjectName(gw.Name)}
		var prev []metav1.Condition
		if i := slices.IndexFunc(parents, func(p gatewayv1.RouteParentStatus) bool {
			return ours(p) && equality.Semantic.DeepEqual(p.ParentRef, ref)
		}); i >= 0 {
			prev = parents[i].Conditions
		}
		cond := metaCondition(wafv1alpha1.ConditionPolicyAffected, true, wafv1alpha1.ReasonPolicyAffected,
			"Route protected by WAFGatewayBindingPolicy "+affected[gw], gen)
		if why, ok := leftOut[gw]; ok {
			cond = metaCondition(wafv1alpha1.ConditionRouteTableAccepted, false, why.Reason, why.Message, gen)
		}
		out = append(out, gatewayv1.RouteParentStatus{ParentRef: ref, ControllerName: wafv1alpha1.BindingControllerName,
			Conditions: mergeConditions(prev, cond)})
	}
	return out
}
