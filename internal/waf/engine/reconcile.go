package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/driver"
)

// Results of a reconcile, the values of the result label of
// portal_waf_engine_reconciles_total.
const (
	ResultProvisioned           = "provisioned"
	ResultNotAccepted           = "not_accepted"
	ResultRuleSetNotFound       = "ruleset_not_found"
	ResultRuleSetNotReady       = "ruleset_not_ready"
	ResultUnsupportedRules      = "unsupported_rules"
	ResultTargetServiceNotFound = "target_service_not_found"
	ResultImageNotAllowed       = "image_not_allowed"
	ResultFailed                = "failed"
)

// outcome is what one reconcile found, turned into status by writeStatus.
type outcome struct {
	result string
	// accepted, ready and degraded are the conditions' status, reason and
	// message.
	accepted, ready, degraded metav1.Condition
	gateways                  []wafv1alpha1.MatchedGateway
	revision                  string
	tokenExpiry               *metav1.Time
}

// refuse records why the Engine is not Ready: Degraded with the same
// reason.
func (o outcome) refuse(result, reason, msg string) outcome {
	o.result = result
	o.ready = cond(wafv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	o.degraded = cond(wafv1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
	return o
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// reconcile decides and provisions; it returns the outcome for status and
// when to come back.
func (r *Reconciler) reconcile(ctx context.Context, eng *wafv1alpha1.Engine) (outcome, time.Duration, error) {
	var o outcome
	reason, msg, err := r.checkTarget(ctx, eng)
	if err != nil {
		return r.failed(o, err), 0, err
	}
	if reason != wafv1alpha1.ReasonAccepted {
		// A data plane left behind would still enforce (or, failing open,
		// not enforce) for a Gateway this Engine no longer owns. Once the
		// status says it is gone, resyncs of an Engine that stays refused
		// cost the API server nothing but this check.
		if prev := meta.FindStatusCondition(eng.Status.Conditions, wafv1alpha1.ConditionAccepted); prev == nil ||
			prev.Status != metav1.ConditionFalse || prev.ObservedGeneration != eng.Generation {
			if err := r.teardown(ctx, eng, r.everything(eng)); err != nil {
				return r.failed(o, err), 0, err
			}
		}
		r.tokens.forget(eng.UID)
		o.result = ResultNotAccepted
		o.accepted = cond(wafv1alpha1.ConditionAccepted, metav1.ConditionFalse, reason, msg)
		o.ready = cond(wafv1alpha1.ConditionReady, metav1.ConditionFalse, wafv1alpha1.ReasonNotAccepted, msg)
		o.degraded = cond(wafv1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
		return o, 0, nil
	}
	o.accepted = cond(wafv1alpha1.ConditionAccepted, metav1.ConditionTrue, wafv1alpha1.ReasonAccepted, "the Gateway exists and no older Engine targets it")
	o.gateways = []wafv1alpha1.MatchedGateway{{Name: eng.Spec.Target.Name}}

	var rs wafv1alpha1.RuleSet
	if err := r.client.Get(ctx, client.ObjectKey{Namespace: eng.Namespace, Name: eng.Spec.RuleSet.Name}, &rs); err != nil {
		if !apierrors.IsNotFound(err) {
			return r.failed(o, err), 0, err
		}
		msg := fmt.Sprintf("RuleSet %q does not exist in namespace %s", eng.Spec.RuleSet.Name, eng.Namespace)
		return o.refuse(ResultRuleSetNotFound, wafv1alpha1.ReasonRuleSetNotFound, msg), 0, nil
	}
	if rs.Status.CachedRevision == nil {
		msg := fmt.Sprintf("RuleSet %q has no compiled revision yet", rs.Name)
		if c := meta.FindStatusCondition(rs.Status.Conditions, wafv1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
			msg += fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		}
		return o.refuse(ResultRuleSetNotReady, wafv1alpha1.ReasonRuleSetNotReady, msg), 0, nil
	}
	o.revision = rs.Status.CachedRevision.UUID

	drv, ok := driver.Lookup(driver.Of(eng))
	if !ok {
		// The CRD's enum offers only registered drivers
		// (TestEngineCRDEnumMatchesRegistry); this is an older CRD.
		// Whatever data plane an earlier driver left would keep
		// enforcing the old spec while the status says it failed.
		msg := fmt.Sprintf("this Portal has no driver %q (it has %v)", driver.Of(eng), driver.Names())
		if err := r.teardown(ctx, eng, r.everything(eng)); err != nil {
			return r.failed(o, err), 0, err
		}
		return o.refuse(ResultFailed, wafv1alpha1.ReasonProvisioningFailed, msg), 0, nil
	}
	if msg := unsupported(&rs, drv); msg != "" {
		return o.refuse(ResultUnsupportedRules, wafv1alpha1.ReasonUnsupportedRules, msg), 0, nil
	}

	p, err := r.provision(ctx, eng, drv)
	if err != nil {
		if result, reason, ok := refusal(err); ok {
			return o.refuse(result, reason, err.Error()), 0, nil
		}
		return r.failed(o, err), 0, err
	}
	o.tokenExpiry = p.TokenExpiry
	o.result = ResultProvisioned
	o.ready = cond(wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned, p.Message)
	o.degraded = cond(wafv1alpha1.ConditionDegraded, metav1.ConditionFalse, wafv1alpha1.ReasonAsExpected, "")
	if reason, msg := ruleSetHealth(&rs); reason != "" {
		o.degraded = cond(wafv1alpha1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
	}
	return o, p.Requeue, nil
}

// refusal maps a provisioning error that retrying cannot fix (the Engine or
// Portal's flags must change first) to its result and reason, so it is a
// status, not a reconcile error retried and logged with backoff forever.
// Nothing of the data plane is applied before these checks.
func refusal(err error) (result, reason string, ok bool) {
	var nf *targetServiceNotFound
	var bad *imageNotAllowed
	var none *noImage
	switch {
	case errors.As(err, &nf):
		return ResultTargetServiceNotFound, wafv1alpha1.ReasonTargetServiceNotFound, true
	case errors.As(err, &bad):
		return ResultImageNotAllowed, wafv1alpha1.ReasonImageNotAllowed, true
	case errors.As(err, &none):
		return ResultFailed, wafv1alpha1.ReasonProvisioningFailed, true
	}
	return "", "", false
}

// provision applies the driver's data plane, then removes what every other
// driver owns for the Engine, so that an Engine moved between drivers is
// never enforced by both once the new one is up.
func (r *Reconciler) provision(ctx context.Context, eng *wafv1alpha1.Engine, drv driver.Driver) (driver.Result, error) {
	// Its errors are the Ready condition's message as they are: each
	// already names the object or setting at fault.
	p, err := drv.Provision(ctx, host{r}, eng)
	if err != nil {
		return driver.Result{}, err
	}
	if p.TokenExpiry == nil {
		r.tokens.forget(eng.UID)
	}
	if err := r.teardown(ctx, eng, r.ownedByOthers(eng, drv)); err != nil {
		return driver.Result{}, err
	}
	return p, nil
}

// failed is the outcome of an error while provisioning.
func (r *Reconciler) failed(o outcome, err error) outcome {
	o.result = ResultFailed
	if o.accepted.Type == "" {
		o.accepted = cond(wafv1alpha1.ConditionAccepted, metav1.ConditionUnknown, wafv1alpha1.ReasonProvisioningFailed, err.Error())
	}
	o.ready = cond(wafv1alpha1.ConditionReady, metav1.ConditionFalse, wafv1alpha1.ReasonProvisioningFailed, err.Error())
	o.degraded = cond(wafv1alpha1.ConditionDegraded, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioningFailed, err.Error())
	return o
}

// checkTarget returns ReasonAccepted, or why the Engine may not attach to
// its target: the Gateway is missing, or an older Engine claims it.
func (r *Reconciler) checkTarget(ctx context.Context, eng *wafv1alpha1.Engine) (reason, msg string, err error) {
	gw := &metav1.PartialObjectMetadata{}
	gw.SetGroupVersionKind(GatewayGVK)
	err = r.client.Get(ctx, client.ObjectKey{Namespace: eng.Namespace, Name: eng.Spec.Target.Name}, gw)
	switch {
	case meta.IsNoMatchError(err):
		return wafv1alpha1.ReasonTargetNotFound, "the Gateway API (gateway.networking.k8s.io/v1 Gateway) is not installed in the cluster", nil
	case apierrors.IsNotFound(err):
		return wafv1alpha1.ReasonTargetNotFound, fmt.Sprintf("Gateway %q does not exist in namespace %s", eng.Spec.Target.Name, eng.Namespace), nil
	case err != nil:
		return "", "", fmt.Errorf("get Gateway %s/%s: %w", eng.Namespace, eng.Spec.Target.Name, err)
	}
	var list wafv1alpha1.EngineList
	if err := r.client.List(ctx, &list, client.InNamespace(eng.Namespace), client.MatchingFields{indexTarget: eng.Spec.Target.Name}); err != nil {
		return "", "", fmt.Errorf("list Engines targeting %s: %w", eng.Spec.Target.Name, err)
	}
	if w := winner(list.Items); w != nil && w.UID != eng.UID {
		return wafv1alpha1.ReasonTargetConflict, fmt.Sprintf("Engine %q, older, already targets Gateway %q; one Engine per Gateway", w.Name, eng.Spec.Target.Name), nil
	}
	return wafv1alpha1.ReasonAccepted, "", nil
}

// winner is the Engine that owns a target among those naming it: the
// oldest not being deleted, ties broken by name.
func winner(engines []wafv1alpha1.Engine) *wafv1alpha1.Engine {
	var w *wafv1alpha1.Engine
	for i := range engines {
		e := &engines[i]
		if !e.DeletionTimestamp.IsZero() {
			continue
		}
		if w == nil || e.CreationTimestamp.Before(&w.CreationTimestamp) ||
			(e.CreationTimestamp.Equal(&w.CreationTimestamp) && e.Name < w.Name) {
			w = e
		}
	}
	return w
}

// unsupported says why the driver refuses the RuleSet's cached revision, or
// "" when it does not: rules it cannot run (the RuleSet controller found
// them with the driver's Limits), not acknowledged with the
// allow-unsupported-rules annotation.
func unsupported(rs *wafv1alpha1.RuleSet, drv driver.Driver) string {
	if rs.Annotations[wafv1alpha1.AnnotationAllowUnsupportedRules] == "true" {
		return ""
	}
	var ids []string
	for _, u := range rs.Status.UnsupportedRules {
		if u.Driver != string(drv.Name()) {
			continue
		}
		what := fmt.Sprintf("rule %d", u.RuleID)
		if u.Operator != "" {
			what += " (@" + strings.TrimPrefix(u.Operator, "@") + ")"
		}
		ids = append(ids, what)
	}
	if len(ids) == 0 {
		return ""
	}
	const most = 8
	more := ""
	if len(ids) > most {
		more = fmt.Sprintf(" and %d more", len(ids)-most)
		ids = ids[:most]
	}
	runtime := drv.Limits().Runtime
	if runtime == "" {
		runtime = "the " + string(drv.Name()) + " driver"
	}
	return fmt.Sprintf("RuleSet %q revision %s holds rules %s cannot run: %s%s (see the RuleSet's status.unsupportedRules); remove them, or acknowledge them with the annotation %s: \"true\" on the RuleSet",
		rs.Name, rs.Status.CachedRevision.UUID, runtime, strings.Join(ids, ", "), more, wafv1alpha1.AnnotationAllowUnsupportedRules)
}

// ruleSetHealth returns RuleSetDegraded and why when the RuleSet serves an
// older revision than its inputs or is Degraded.
func ruleSetHealth(rs *wafv1alpha1.RuleSet) (reason, msg string) {
	if c := meta.FindStatusCondition(rs.Status.Conditions, wafv1alpha1.ConditionDegraded); c != nil && c.Status == metav1.ConditionTrue {
		return wafv1alpha1.ReasonRuleSetDegraded, fmt.Sprintf("RuleSet %q is Degraded (%s): %s", rs.Name, c.Reason, c.Message)
	}
	if c := meta.FindStatusCondition(rs.Status.Conditions, wafv1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		return wafv1alpha1.ReasonRuleSetDegraded, fmt.Sprintf("RuleSet %q is not Ready (%s): %s; its last good revision is served", rs.Name, c.Reason, c.Message)
	}
	return "", ""
}

// writeStatus applies the outcome to the Engine's status and records an
// event when a condition's reason changes.
func (r *Reconciler) writeStatus(ctx context.Context, eng *wafv1alpha1.Engine, o outcome) error {
	st := eng.Status.DeepCopy()
	changed := []metav1.Condition{}
	for _, c := range []metav1.Condition{o.accepted, o.ready, o.degraded} {
		if c.Type == "" {
			continue
		}
		c.ObservedGeneration = eng.Generation
		if old := meta.FindStatusCondition(st.Conditions, c.Type); old == nil || old.Reason != c.Reason || old.Status != c.Status {
			changed = append(changed, c)
		}
		meta.SetStatusCondition(&st.Conditions, c)
	}
	st.ObservedGeneration = eng.Generation
	st.MatchedGateways = o.gateways
	st.RuleSetRevision = o.revision
	st.TokenExpiresAt = o.tokenExpiry
	if equality.Semantic.DeepEqual(st, &eng.Status) {
		return nil
	}
	u, err := toUnstructured(st)
	if err != nil {
		return err
	}
	obj := newUnstructured(wafv1alpha1.GroupVersion.WithKind("Engine"), map[string]any{"name": eng.Name, "namespace": eng.Namespace})
	obj.Object["status"] = u
	if err := r.client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("write status of Engine %s/%s: %w", eng.Namespace, eng.Name, err))
	}
	r.events(eng, changed)
	return nil
}

// events records one event per changed condition a user would want to
// see.
func (r *Reconciler) events(eng *wafv1alpha1.Engine, changed []metav1.Condition) {
	if r.opts.Recorder == nil {
		return
	}
	degradedChanged := slices.ContainsFunc(changed, func(d metav1.Condition) bool { return d.Type == wafv1alpha1.ConditionDegraded })
	for _, c := range changed {
		switch {
		case c.Type == wafv1alpha1.ConditionDegraded && c.Status == metav1.ConditionFalse:
			continue
		case c.Type == wafv1alpha1.ConditionReady && c.Status == metav1.ConditionFalse && degradedChanged:
			continue // the Degraded event says why
		}
		typ := "Warning"
		if c.Status == metav1.ConditionTrue && c.Type != wafv1alpha1.ConditionDegraded {
			typ = "Normal"
		}
		msg := c.Message
		if msg == "" {
			msg = c.Type + " is " + string(c.Status)
		}
		r.opts.Recorder.Eventf(eng, nil, typ, c.Reason, "Reconcile", "%s", msg)
	}
}
