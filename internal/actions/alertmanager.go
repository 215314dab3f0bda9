package actions

import (
	"context"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/vilaca/portal/internal/core"
)

func init() { Register("alertmanager", func(env Env) Action { return &alert{env: env} }) }

// alert is delivered by the findings pipeline's Alertmanager sink, which
// already holds each finding's state: it raises an alert named by the
// action's template when the finding opens, re-sends it while it stays
// open, and resolves it when it clears, surviving Alertmanager outages and
// leader changes. The action only records that hand-over; a second,
// event-based sender here would duplicate alerts and could not resolve
// them. Admission verdicts are events, not state: they raise no alert
// (give the rule the audit mode too).
type alert struct{ env Env }

func (a *alert) Apply(_ context.Context, req *Request) (Outcome, error) {
	switch {
	case req.Mode == core.ModeAdmission:
		return outcome(ResultSkipped, "admission verdicts raise no alert; the rule's audit findings do"), nil
	case !a.env.AlertsSink:
		return outcome(ResultDisabled, "no Alertmanager sink (--alertmanager-url) to raise alert %s", req.Param("template")), nil
	}
	if req.Mode == core.ModeRuntime {
		return outcome(ResultSuccess, "alert %s raised by the Alertmanager sink for the runtime finding's window", req.Param("template")), nil
	}
	return outcome(ResultSuccess, "alert %s raised by the Alertmanager sink until the finding clears", req.Param("template")), nil
}

func (*alert) Permissions() []authorizationv1.ResourceAttributes { return nil }
