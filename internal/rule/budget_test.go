package rule_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// TestBudgetExceededCondition: a rule whose evaluation runs out of its
// budget gets the BudgetExceeded condition (reason and last message) and a
// counted metric, Ready stays True, and editing the rule clears it.
func TestBudgetExceededCondition(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	pcr := &policyv1alpha1.PortalClusterRule{
		ObjectMeta: metav1.ObjectMeta{Name: "loops"},
		Spec: policyv1alpha1.RuleSpec{
			Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "Pod"}}},
			Rule:  `let a = 1..1000; any(a, {any(a, {any(a, {# < 0})})})`,
		},
	}
	if err := env.client.Create(ctx, pcr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), pcr) })
	eventually(t, "rule loaded", func() bool {
		return verdict(t, env.engine, privilegedPod("default"), "loops") == core.OutcomeError
	})
	if n := testutil.ToFloat64(env.budget.Exceeded().WithLabelValues("loops")); n < 1 {
		t.Errorf("portal_rule_budget_exceeded_total{rule=loops} = %v", n)
	}
	eventually(t, "BudgetExceeded=True with the operations reason", func() bool {
		ready, st := readyOf(t, env.client, pcr)
		c := meta.FindStatusCondition(st.Conditions, policyv1alpha1.ConditionBudgetExceeded)
		return ready != nil && ready.Status == metav1.ConditionTrue &&
			c != nil && c.Status == metav1.ConditionTrue && c.Reason == policyv1alpha1.ReasonOperationBudget &&
			c.ObservedGeneration == pcr.Generation &&
			strings.Contains(c.Message, "evaluation of Pod default/p stopped: evaluation budget exceeded")
	})

	devtest.Update(t, env.client, pcr, func() { pcr.Spec.Rule = `container.securityContext.privileged == true` })
	eventually(t, "BudgetExceeded removed by the new generation", func() bool {
		ready, st := readyOf(t, env.client, pcr)
		return ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == pcr.Generation &&
			meta.FindStatusCondition(st.Conditions, policyv1alpha1.ConditionBudgetExceeded) == nil
	})
}
