package runtime

import (
	"time"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
)

// revokeAction is the action that, on a runtime event of the API server,
// acts on the credential that made the request.
const revokeAction = "revoke-sa-token"

// offer hands the rule's actions a runtime verdict, without waiting. The
// actions act on the event's target, except revoke-sa-token on an audit
// event: it revokes the acting ServiceAccount's tokens (the credential
// that made the request), not the target pod's, and nothing when a person
// made it. On a Falco alert there is no acting credential, so it revokes
// the pod's own ServiceAccount's, as on any pod.
func (s *Source) offer(r *core.Result, ev *event.Event, now time.Time) {
	if s.o.Verdicts == nil || !r.WantsVerdictIn(core.ModeRuntime) {
		return
	}
	onTarget, onActor := splitActions(r.Rule, ev.Falco == nil)
	if onTarget != nil {
		v := core.Verdict{Result: *r, Mode: core.ModeRuntime, Observed: now}
		v.Rule = onTarget
		s.o.Verdicts.Offer(v)
	}
	if onActor == nil {
		return
	}
	ns, name, ok := ev.User.ServiceAccount()
	if !ok || ev.User.UID == "" {
		s.log.Info("runtime revoke-sa-token not run: the request was not made with a ServiceAccount's token",
			"rule", r.Rule.MetricLabel(), "user", ev.User.Username)
		return
	}
	// The UID of a ServiceAccount's user is the account's UID: the action
	// acts only on the live account with exactly that UID, so a recreated
	// account of the same name is not touched.
	v := core.Verdict{Mode: core.ModeRuntime, Observed: now, Result: core.Result{
		Rule: onActor, Outcome: core.OutcomeFail, Message: r.Message,
		Resource: core.ResourceRef{APIVersion: "v1", Kind: "ServiceAccount", Namespace: ns, Name: name, UID: ev.User.UID},
	}}
	s.o.Verdicts.Offer(v)
}

// splitActions returns copies of rule with the actions on the target and
// the actions on the actor (nil where there are none).
func splitActions(rule *core.Rule, auditEvent bool) (onTarget, onActor *core.Rule) {
	var t, a []core.ActionSpec
	for _, x := range rule.Actions {
		if auditEvent && x.Type == revokeAction {
			a = append(a, x)
		} else {
			t = append(t, x)
		}
	}
	if len(a) == 0 {
		return rule, nil
	}
	if len(t) > 0 {
		c := *rule
		c.Actions = t
		onTarget = &c
	}
	c := *rule
	c.Actions = a
	return onTarget, &c
}
