package actions

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vilaca/portal/internal/core"
)

// TenantKeyPrefix is core.TenantKeyPrefix.
const TenantKeyPrefix = core.TenantKeyPrefix

// attemptTimeout bounds one attempt, so an API server that does not answer
// cannot hold a worker, and the actions queued behind it, for ever.
const attemptTimeout = 30 * time.Second

// run makes one attempt and records it: audit line, Event, counter.
func (e *Engine) run(ctx context.Context, t task) {
	req := &t.req
	out := Outcome{Result: t.result, Detail: t.detail}
	var err error
	switch {
	case out.Result == ResultRateLimited:
		out.Detail = "rate limit of the rule and target reached (" + cmpOr(req.Param("rateLimit"), e.o.DefaultRateLimit) + ")"
	case out.Result != "":
	default:
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		out, err = e.attempt(actx, req)
		cancel()
	}
	if t.entry != nil && out.Result != ResultSuccess && out.Result != ResultDryRun {
		// Not in effect: the next change of the object tries again.
		e.forget(t.entry)
	}
	if out.Result == ResultSkipped && err == nil {
		e.refund(req.Key, t.charged)
	}
	if err != nil {
		out.Result = ResultFailure
		out.Detail = err.Error()
	}
	e.metrics.Actions.WithLabelValues(req.Spec.Type, out.Result).Inc()
	if !t.observed.IsZero() && !req.Revert && (out.Result == ResultSuccess || out.Result == ResultDryRun) {
		e.metrics.Latency.WithLabelValues(req.Spec.Type).Observe(time.Since(t.observed).Seconds())
	}
	e.audit(req, out)
	e.event(req, out)
}

// attempt applies the guards, then dry-run, then the action.
func (e *Engine) attempt(ctx context.Context, req *Request) (Outcome, error) {
	if o, denied := e.guard(req); denied {
		return o, nil
	}
	if !e.enabled[req.Spec.Type] {
		return outcome(ResultDisabled, "action %s is not enabled (--actions-enabled)", req.Spec.Type), nil
	}
	a := e.actions[req.Spec.Type]
	if a == nil {
		return Outcome{}, fmt.Errorf("%s: %w", req.Spec.Type, errNoAction)
	}
	if req.Revert {
		r, ok := a.(Reverter)
		if !ok || req.Param("keep") == "true" {
			return outcome(ResultSkipped, "finding cleared; %s keeps what it did", req.Spec.Type), nil
		}
		if e.dryRun(req) {
			return outcome(ResultDryRun, "would undo %s on %s", req.Spec.Type, target(req.Object)), nil
		}
		return r.Revert(ctx, req)
	}
	if e.dryRun(req) {
		return outcome(ResultDryRun, "would %s", describe(req)), nil
	}
	return a.Apply(ctx, req)
}

func (e *Engine) dryRun(req *Request) bool { return e.o.DryRun || req.Param("dryRun") == "true" }

// guard refuses what no rule may do, whatever its findings say. Reverts
// pass: they only undo what Portal itself added.
func (e *Engine) guard(req *Request) (Outcome, bool) {
	if req.Revert {
		return Outcome{}, false
	}
	r, obj := req.Rule, req.Object
	if r.Namespace != "" && obj.Namespace != r.Namespace {
		return outcome(ResultDenied, "PortalRule %s/%s may only act on objects in namespace %s, not on %s", r.Namespace, r.Name, r.Namespace, target(obj)), true
	}
	if a, ok := e.actions[req.Spec.Type].(Destructive); ok && a.Destructive() && e.protected(obj.Namespace) {
		return outcome(ResultDenied, "%s never acts in protected namespace %q", req.Spec.Type, obj.Namespace), true
	}
	if k := req.Param("key"); r.Namespace != "" && k != "" && !strings.HasPrefix(k, TenantKeyPrefix) {
		return outcome(ResultDenied, "PortalRule %s/%s may only set keys under %s, not %q", r.Namespace, r.Name, TenantKeyPrefix, k), true
	}
	return Outcome{}, false
}

func (e *Engine) protected(ns string) bool {
	if ns == "" {
		return false
	}
	return ns == e.o.Namespace || slices.Contains(e.o.Protected, ns)
}

// audit writes the attempt's JSON line.
func (e *Engine) audit(req *Request, out Outcome) {
	level := slog.LevelInfo
	if out.Result == ResultFailure {
		level = slog.LevelWarn
	}
	e.log.Log(context.Background(), level, "response action",
		"audit", "action",
		"action", req.Spec.Type,
		"result", out.Result,
		"revert", req.Revert,
		"mode", string(req.Mode),
		"rule", req.Rule.Source.String(),
		"ruleName", req.Rule.Name,
		"apiVersion", req.Object.APIVersion,
		"kind", req.Object.Kind,
		"namespace", req.Object.Namespace,
		"name", req.Object.Name,
		"uid", req.Object.UID,
		"detail", out.Detail,
		"key", req.Key[:16],
	)
}

// event records the attempt on the target. Denied attempts record nothing
// there: the target may be in a namespace the rule's author cannot see.
// Nor do attempts of admission verdicts until the action has found the
// live object to be the reviewed one: a forged or dry-run review naming
// someone else's object must not write on it.
func (e *Engine) event(req *Request, out Outcome) {
	if e.o.Recorder == nil || out.Result == ResultDenied || out.Result == ResultDuplicate || req.Object.Name == "" {
		return
	}
	if req.fromVerdict() && !req.Revert && !req.confirmed {
		return
	}
	obj := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: req.Object.APIVersion, Kind: req.Object.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: req.Object.Namespace, Name: req.Object.Name, UID: types.UID(req.Object.UID)},
	}
	typ, reason := corev1.EventTypeNormal, "ActionApplied"
	switch {
	case out.Result == ResultDryRun:
		reason = "ActionDryRun"
	case req.Revert && out.Result == ResultSuccess:
		reason = "ActionReverted"
	case out.Result == ResultSuccess:
	case out.Result == ResultSkipped:
		reason = "ActionSkipped"
	case out.Result == ResultBlocked:
		typ, reason = corev1.EventTypeWarning, "ActionBlocked"
	case out.Result == ResultRateLimited:
		typ, reason = corev1.EventTypeWarning, "ActionRateLimited"
	case out.Result == ResultDisabled:
		typ, reason = corev1.EventTypeWarning, "ActionDisabled"
	default:
		typ, reason = corev1.EventTypeWarning, "ActionFailed"
	}
	e.o.Recorder.Eventf(obj, nil, typ, reason, req.Spec.Type, "%s", eventNote(req.Rule.Name, out.Detail))
}

// eventNote is an Event's note for an attempt. The detail can quote a
// rule's message or an API error; the API server refuses a note over 1 KiB,
// and the Event would be lost.
func eventNote(rule, detail string) string {
	return core.Truncate("rule "+rule+": "+detail, core.MaxEventNoteBytes)
}

func target(r core.ResourceRef) string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// describe says what an action would do, for dry-run.
func describe(req *Request) string {
	var params []string
	for _, k := range []string{"key", "value", "template", "minHealthyReplicas", "recreateServiceAccount"} {
		if v := req.Param(k); v != "" {
			params = append(params, k+"="+v)
		}
	}
	s := req.Spec.Type + " " + target(req.Object)
	if len(params) > 0 {
		s += " (" + strings.Join(params, ", ") + ")"
	}
	return s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
