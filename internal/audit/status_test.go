package audit_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// Rules come and go as custom resources: the first audit rule on pods starts
// the pod informer, deleting it stops the informer and clears its findings.
// Meanwhile the leader writes evalCount and violationCount to the rule's
// status, at a bounded rate.
func TestRuleLifecycleAndStatusCounts(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "status")
	inst := startInstance(t, instanceOptions{crRules: true})
	for _, name := range []string{"a", "b", "c"} {
		create(t, c, pod(ns, name, true, nil))
	}
	eventually(t, 30*time.Second, "instance leads with no informer", func() (bool, error) {
		return inst.leader(t) && inst.metric(t, "portal_audit_watched_resources", nil) == 0, nil
	})

	pr := &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-privileged"},
		Spec: policyv1alpha1.RuleSpec{
			Mode:     []policyv1alpha1.Mode{"audit"},
			Severity: "high",
			Match:    policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "Pod"}}},
			Rule:     privileged,
			Message:  "container {{ container.name }} is privileged",
			Enabled:  ptr.To(true),
		},
	}
	started := time.Now()
	create(t, c, pr)
	waitReport(t, c, ns, "findings of the new rule", func(st reportState) bool { return st.fail == 3 })
	if n := inst.metric(t, "portal_audit_watched_resources", nil); n != 1 {
		t.Errorf("watching %v resources, want 1 (pods)", n)
	}
	eventually(t, 30*time.Second, "status counts", func() (bool, error) {
		st, err := ruleStatus(c, pr)
		return err == nil && st.ViolationCount == 3 && st.EvalCount >= 3, err
	})

	if err := c.Delete(context.Background(), pod(ns, "a", true, nil)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "violationCount follows the open findings", func() (bool, error) {
		st, err := ruleStatus(c, pr)
		return err == nil && st.ViolationCount == 2, err
	})
	elapsed := time.Since(started)
	writes := inst.metric(t, "portal_rule_status_count_writes_total", nil)
	// One rule: at most one write per 200 ms interval, plus the first.
	if limit := float64(elapsed/(200*time.Millisecond)) + 2; writes > limit {
		t.Errorf("%v count writes in %v, more than the rate allows (%v)", writes, elapsed, limit)
	}
	t.Logf("%v count writes in %v", writes, elapsed)

	if err := c.Delete(context.Background(), pr); err != nil {
		t.Fatal(err)
	}
	waitReport(t, c, ns, "findings of the deleted rule cleared", func(st reportState) bool { return len(st.reports) == 0 })
	eventually(t, 30*time.Second, "pod informer stopped", func() (bool, error) {
		return inst.metric(t, "portal_audit_watched_resources", nil) == 0, nil
	})
}

func ruleStatus(c client.Client, pr *policyv1alpha1.PortalRule) (policyv1alpha1.RuleStatus, error) {
	var got policyv1alpha1.PortalRule
	err := c.Get(context.Background(), client.ObjectKeyFromObject(pr), &got)
	return got.Status, err
}
