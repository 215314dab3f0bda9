// Package actions is the response-action engine: it runs a rule's actions
// (label, annotate, evict, patch-networkpolicy, revoke-sa-token,
// alertmanager) on the objects the rule finds in violation, on the leader
// only.
//
// It consumes two streams. Findings come from the findings pipeline as a
// leader-only sink: each batch is the current state of objects, so the
// engine sees a finding appear (run the action) and clear (undo what it
// added: a label, an annotation, a quarantine NetworkPolicy). Admission
// verdicts come through core.VerdictSink: Offer never blocks the webhook; a
// full queue is counted (portal_actions_dropped_total) and logged.
//
// Every attempt passes the same gates, in order: the guards (a PortalRule
// acts only in its own namespace; destructive actions never touch protected
// namespaces), idempotency (sha256 of rule, kind, namespace, name and action
// in a bounded LRU), the sliding-window rate limit per rule and target, and
// dry-run. Each attempt writes one JSON audit line, an Event on the target
// and portal_actions_total{action,result}.
//
// Adding an action is one type implementing Action and one Register call.
package actions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/core"
)

// Results of an attempt: the result label of portal_actions_total.
const (
	// ResultSuccess: the action was done (or undone, for a revert).
	ResultSuccess = "success"
	// ResultFailure: the API server or the action failed; a later change
	// of the object tries again.
	ResultFailure = "failure"
	// ResultBlocked: a safety check of the cluster or of the action
	// refused it (a PodDisruptionBudget, minHealthyReplicas); not retried
	// until the object's findings change again.
	ResultBlocked = "blocked"
	// ResultSkipped: nothing to do (the object is gone, the action does
	// not apply to its kind, an admission verdict is not about the live
	// object).
	ResultSkipped = "skipped"
	// ResultDenied: a guard refused it (another namespace, a protected
	// namespace, a key a PortalRule may not set).
	ResultDenied = "denied"
	// ResultDisabled: the action type is not enabled (--actions-enabled).
	ResultDisabled = "disabled"
	// ResultRateLimited: the rule and target used up the action's rate.
	ResultRateLimited = "rate_limited"
	// ResultDryRun: logged what would happen, changed nothing.
	ResultDryRun = "dry_run"
	// ResultDuplicate: the same action on the same target is already in
	// effect (idempotency key held); not an attempt, counted only.
	ResultDuplicate = "duplicate"
)

// Request is one action to run, or undo, on one object.
type Request struct {
	Rule *core.Rule
	// Spec is the rule's action; Index its position in the rule.
	Spec  core.ActionSpec
	Index int
	// Object is the target, Message the finding's message.
	Object  core.ResourceRef
	Message string
	// Mode is the loop that found the violation.
	Mode core.Mode
	// Revert asks to undo what the action added: the finding cleared.
	Revert bool
	// Key is the idempotency key.
	Key string

	// confirmed is set once the action found that the live object is the
	// one an admission verdict reviewed; only then does the attempt of an
	// admission verdict record an Event on it.
	confirmed bool
}

// Param returns the action's parameter k ("" when unset).
func (r *Request) Param(k string) string { return r.Spec.Params[k] }

// reviewed reports whether live, the UID of the object an action is about
// to change, is the object an admission verdict was about. Anyone who
// reaches the webhook port can post a review naming any object, and a
// dry-run or refused CREATE can reuse a live object's name: only the UID
// ties a verdict to one object. Audit findings and reverts pass unchecked.
func (r *Request) reviewed(live types.UID) (Outcome, bool) {
	if !r.fromVerdict() || r.Revert {
		return Outcome{}, true
	}
	if live == "" || string(live) != r.Object.UID {
		return notReviewed(r, live), false
	}
	r.confirmed = true
	return Outcome{}, true
}

// fromVerdict reports whether the request comes from a verdict (an
// admission decision or a runtime event) rather than a finding: such a
// request names its object by UID, and acts only on the live object with
// exactly that UID. A runtime event's UID is the target's as the cluster
// cache held it, or the acting ServiceAccount's from the request's
// credentials.
func (r *Request) fromVerdict() bool {
	return r.Mode == core.ModeAdmission || r.Mode == core.ModeRuntime
}

// gone is the outcome of a request whose target does not exist.
func gone(r *Request) Outcome {
	if o, ok := r.reviewed(""); !ok {
		return o
	}
	return outcome(ResultSkipped, "%s is gone", target(r.Object))
}

// reviewedUID is the UID an admission verdict's action writes as a
// precondition, so the API server refuses the change should the object be
// replaced after the action read it; "" for audit findings.
func (r *Request) reviewedUID() string {
	if !r.fromVerdict() || r.Revert {
		return ""
	}
	return r.Object.UID
}

// notReviewed is the outcome of an admission verdict whose object is not
// the live one.
func notReviewed(r *Request, live types.UID) Outcome {
	if live == "" {
		return outcome(ResultSkipped, "the reviewed object (UID %s) is not the live %s, which is gone: not acted on", cmpOr(r.Object.UID, "none"), target(r.Object))
	}
	return outcome(ResultSkipped, "the reviewed object (UID %s) is not the live %s (UID %s): not acted on", cmpOr(r.Object.UID, "none"), target(r.Object), live)
}

// replaced is the outcome of an admission verdict's write that the API
// server refused on its UID precondition: the object was replaced after
// the action checked it, so it is not the reviewed one either.
func replaced(r *Request) Outcome {
	r.confirmed = false
	return outcome(ResultSkipped, "the reviewed object (UID %s) is not the live %s: it was replaced; not acted on", r.Object.UID, target(r.Object))
}

// uidRefused reports whether the API server refused a write because its
// metadata.uid is not the stored object's: a UID precondition failed.
func uidRefused(err error) bool {
	if apierrors.IsConflict(err) {
		return true
	}
	if !apierrors.IsInvalid(err) {
		return false
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}

// Outcome is what an attempt did: a Result constant and, for the audit line
// and the Event, what was done or why not.
type Outcome struct {
	Result string
	Detail string
}

func outcome(result, format string, args ...any) Outcome {
	return Outcome{Result: result, Detail: fmt.Sprintf(format, args...)}
}

// Action is one response action. Apply is only called for requests that
// passed the guards, the rate limit and dry-run. A returned error is a
// failure (ResultFailure); Apply reports refusals it understands (a
// PodDisruptionBudget) as an Outcome.
type Action interface {
	// Apply runs the action on req.Object.
	Apply(ctx context.Context, req *Request) (Outcome, error)
	// Permissions are the API requests the action makes, checked with a
	// SelfSubjectAccessReview at start: a rule whose action lacks one says
	// so in its status.
	Permissions() []authorizationv1.ResourceAttributes
}

// Reverter is an action that undoes what it added when the finding clears,
// unless the rule says keep.
type Reverter interface {
	Revert(ctx context.Context, req *Request) (Outcome, error)
}

// Destructive marks actions that must never run in protected namespaces
// (kube-system, Portal's own): they delete, evict or cut traffic.
type Destructive interface {
	Destructive() bool
}

// Env is what an action is built with.
type Env struct {
	// Client writes; Reader reads straight from the API server (no
	// informer is started for what an action reads once).
	Client client.Client
	Reader client.Reader
	// Policy is the policy/v1 REST client evictions are posted with:
	// client-go retries a 429 with Retry-After by itself, up to ten times,
	// which would turn a PodDisruptionBudget's refusal into a loop; the
	// evict action asks for no retry. NewPolicyClient builds it.
	Policy rest.Interface
	// AlertsSink is true when the pipeline's Alertmanager sink runs.
	AlertsSink bool
	Logger     *slog.Logger
}

// Factory builds an action.
type Factory func(Env) Action

// registry holds the action types, filled by init functions only.
var registry = map[string]Factory{}

// Register adds an action type. It is called from init functions.
func Register(typ string, f Factory) {
	if _, dup := registry[typ]; dup {
		panic("actions: " + typ + " registered twice")
	}
	registry[typ] = f
}

// Permissions returns the API permissions every use of action type typ
// needs, as ActionsReady checks them; false for an unknown type.
func Permissions(typ string) ([]authorizationv1.ResourceAttributes, bool) {
	f, ok := registry[typ]
	if !ok {
		return nil, false
	}
	return f(Env{}).Permissions(), true
}

// Types returns every registered action type, sorted.
func Types() []string {
	out := make([]string, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// NewPolicyClient returns the REST client of Env.Policy.
func NewPolicyClient(cfg *rest.Config) (rest.Interface, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("policy client: %w", err)
	}
	return cs.PolicyV1().RESTClient(), nil
}
