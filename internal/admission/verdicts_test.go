package admission_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
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

// TestVerdictsCarryTheReviewedObject: each verdict names the reviewed
// object by UID (object's, else oldObject's), so the actions can tell it
// from a live object that merely shares its name; a dry-run request hands
// nothing over, since it changes nothing and the webhook declares no side
// effects.
func TestVerdictsCarryTheReviewedObject(t *testing.T) {
	label := core.ActionSpec{Type: "label", Params: map[string]string{"key": "portal.io/flag", "value": "x"}}
	r := &core.Rule{Name: "flag", EnforcementAction: core.ActionDeny, Actions: []core.ActionSpec{label}}
	ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: "default", Name: "p"}
	rec := &verdictRecorder{}
	wh, err := admission.New(admission.Options{
		Evaluator:  fixed{{Rule: r, Resource: ref, Outcome: core.OutcomeFail, Message: "flagged"}},
		Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), Verdicts: rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(uid string) string {
		meta := `"name":"p","namespace":"default"`
		if uid != "" {
			meta += `,"uid":"` + uid + `"`
		}
		return `{"apiVersion":"v1","kind":"Pod","metadata":{` + meta + `},"spec":{"containers":[{"name":"c","image":"x"}]}}`
	}
	for _, tc := range []struct {
		name, op, object, oldObject string
		dryRun                      bool
		want                        []string // UIDs handed over
	}{
		{"CREATE", "CREATE", pod("created"), "null", false, []string{"created"}},
		{"UPDATE", "UPDATE", pod("stored"), pod("stored"), false, []string{"stored"}},
		{"UPDATE, object without uid", "UPDATE", pod(""), pod("stored"), false, []string{"stored"}},
		{"DELETE", "DELETE", "null", pod("stored"), false, []string{"stored"}},
		{"no uid at all", "CREATE", pod(""), "null", false, []string{""}},
		{"dry-run CREATE", "CREATE", pod("created"), "null", true, nil},
		{"dry-run UPDATE", "UPDATE", pod("stored"), pod("stored"), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.mu.Lock()
			rec.vs = nil
			rec.mu.Unlock()
			body := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"r",`+
				`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},`+
				`"name":"p","namespace":"default","operation":%q,"userInfo":{"username":"mallory"},"object":%s,"oldObject":%s,"dryRun":%v}}`,
				tc.op, tc.object, tc.oldObject, tc.dryRun)
			if resp := post(t, wh, body); resp.Allowed {
				t.Fatalf("the deny rule admitted: %+v", resp)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			var got []string
			for _, v := range rec.vs {
				got = append(got, v.Resource.UID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("verdicts handed over with UIDs %q, want %q", got, tc.want)
			}
		})
	}
}
