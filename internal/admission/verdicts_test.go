package admission_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// fixed is an Evaluator that returns the same results for every object.
type fixed []core.Result

func (f fixed) Evaluate(context.Context, *unstructured.Unstructured, engine.Options) ([]core.Result, error) {
	return f, nil
}

// verdictRecorder is a core.VerdictSink that keeps what it is offered.
type verdictRecorder struct {
	mu sync.Mutex
	vs []core.Verdict
}

func (r *verdictRecorder) Offer(v core.Verdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vs = append(r.vs, v)
}

// TestVerdictsHandedToActions: the failing results of rules with an action
// for admission reach the verdict sink after the decision, and nothing
// else does.
func TestVerdictsHandedToActions(t *testing.T) {
	label := core.ActionSpec{Type: "label", Params: map[string]string{"key": "portal.io/flag", "value": "x"}}
	auditOnly := core.ActionSpec{Type: "evict", Modes: []core.Mode{core.ModeAudit}}
	withAction := &core.Rule{Name: "flag", EnforcementAction: core.ActionWarn, Actions: []core.ActionSpec{label}}
	auditAction := &core.Rule{Name: "audit-evict", EnforcementAction: core.ActionWarn, Actions: []core.ActionSpec{auditOnly}}
	plain := &core.Rule{Name: "plain", EnforcementAction: core.ActionWarn}
	ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: "default", Name: "p"}
	rec := &verdictRecorder{}
	wh, err := admission.New(admission.Options{
		Evaluator: fixed{
			{Rule: withAction, Resource: ref, Outcome: core.OutcomeFail, Message: "flagged"},
			{Rule: withAction, Resource: ref, Outcome: core.OutcomePass},
			{Rule: auditAction, Resource: ref, Outcome: core.OutcomeFail},
			{Rule: plain, Resource: ref, Outcome: core.OutcomeFail},
		},
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), Verdicts: rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp := post(t, wh, review("v1", "CREATE", "default", false)); !resp.Allowed || len(resp.Warnings) != 3 {
		t.Fatalf("warn rules: %+v", resp)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.vs) != 1 || rec.vs[0].Rule != withAction || rec.vs[0].Operation != "CREATE" || rec.vs[0].Denied || rec.vs[0].Observed.IsZero() {
		t.Fatalf("verdicts handed over: %+v", rec.vs)
	}
}
