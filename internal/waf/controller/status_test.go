package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

func TestConditions(t *testing.T) {
	rev := &wafv1alpha1.Revision{UUID: "u-1", SHA256: "abc"}
	many := make([]ruleset.Finding, 0, 400)
	for i := range 400 {
		many = append(many, ruleset.Finding{Driver: wafv1alpha1.DriverIstioWASM, RuleID: 900000 + i, Reason: "r"})
	}
	op := ruleset.Finding{Driver: wafv1alpha1.DriverIstioWASM, RuleID: 7, Operator: "validateSchema", Reason: "matches every request"}
	cases := []struct {
		name             string
		st               State
		ready, degraded  metav1.ConditionStatus
		rReason, dReason string
		inMessage        string
		unused           bool // no Engine with a limited data plane uses it
	}{
		{"first failure", State{Reason: wafv1alpha1.ReasonInvalidRuleSet, Message: `RuleSource "a" line 2: bad`},
			metav1.ConditionFalse, metav1.ConditionTrue, wafv1alpha1.ReasonInvalidRuleSet, wafv1alpha1.ReasonInvalidRuleSet, "nothing is served", false},
		{"failure over a revision", State{Reason: wafv1alpha1.ReasonRuleDataNotFound, Message: "RuleData not found", Revision: rev},
			metav1.ConditionFalse, metav1.ConditionTrue, wafv1alpha1.ReasonRuleDataNotFound, wafv1alpha1.ReasonRuleDataNotFound, "revision u-1 of earlier inputs is still served", false},
		{"clean", State{Reason: wafv1alpha1.ReasonRulesCached, Revision: rev, RuleCount: 3},
			metav1.ConditionTrue, metav1.ConditionFalse, wafv1alpha1.ReasonRulesCached, wafv1alpha1.ReasonAsExpected, "every rule runs", false},
		{"unsupported", State{Reason: wafv1alpha1.ReasonRulesCached, Revision: rev, Findings: append([]ruleset.Finding{op}, many...)},
			metav1.ConditionTrue, metav1.ConditionTrue, wafv1alpha1.ReasonRulesCached, wafv1alpha1.ReasonUnsupportedRules, "@validateSchema", false},
		{"allowed", State{Reason: wafv1alpha1.ReasonRulesCached, Revision: rev, Findings: many[:2], Allow: true},
			metav1.ConditionTrue, metav1.ConditionFalse, wafv1alpha1.ReasonRulesCached, wafv1alpha1.ReasonUnsupportedRulesAllowed, "900001", false},
		{"unsupported, no istio-wasm Engine", State{Reason: wafv1alpha1.ReasonRulesCached, Revision: rev, Findings: many[:2]},
			metav1.ConditionTrue, metav1.ConditionFalse, wafv1alpha1.ReasonRulesCached, wafv1alpha1.ReasonUnsupportedRulesUnused, "no Engine with the data plane", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			users := []string{"edge"}
			if tc.unused {
				users = nil
			}
			r, d := conditions(tc.st, users)
			if r.Status != tc.ready || d.Status != tc.degraded || r.Reason != tc.rReason || d.Reason != tc.dReason {
				t.Fatalf("Ready %s/%s Degraded %s/%s", r.Status, r.Reason, d.Status, d.Reason)
			}
			if !strings.Contains(r.Message+d.Message, tc.inMessage) || len(d.Message) > maxMessage {
				t.Fatalf("messages %q / %q (%d bytes)", r.Message, d.Message, len(d.Message))
			}
			var st wafv1alpha1.RuleSetStatus
			apply(&st, tc.st, users)
			if len(st.UnsupportedRules) > 128 || len(st.Conditions) != 3 {
				t.Fatalf("status %d unsupported, %d conditions", len(st.UnsupportedRules), len(st.Conditions))
			}
		})
	}
}
