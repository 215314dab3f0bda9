package actions_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// TestExemptedFindingsFireNoAction: a rule's action does not run on a skip
// an exception made, nor on a failure an exception of mode actions covers.
// Each pod also fails a second rule without an exception, listed after the
// first: the actions on one object run in order on one worker, so once the
// second rule's annotation is there, the first rule's would be too, had it
// run.
func TestExemptedFindingsFireNoAction(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	ns := e.namespace("exempted")
	exempted := clusterRule("flag", spec("annotate", "key", "portal.io/flagged", "value", "yes"))
	sentinel := clusterRule("sentinel", spec("annotate", "key", "portal.io/sentinel", "value", "yes"))
	x := &core.Exception{Kind: "PortalException", Namespace: ns, Name: "legacy", Reason: "vendor image"}
	pods := map[*corev1.Pod]core.Outcome{e.pod(ns, "skipped", nil): core.OutcomeSkip, e.pod(ns, "covered", nil): core.OutcomeFail}
	var objs []core.ObjectFindings
	for p, outcome := range pods {
		ref := podRef(p)
		objs = append(objs, core.ObjectFindings{Object: ref, Findings: []core.Finding{
			{Result: core.Result{Rule: exempted, Resource: ref, Outcome: outcome, Exception: x}},
			{Result: core.Result{Rule: sentinel, Resource: ref, Outcome: core.OutcomeFail}},
		}})
	}
	if err := e.eng.Publish(ctx, core.FindingBatch{Objects: objs}); err != nil {
		t.Fatal(err)
	}
	for p := range pods {
		got := &corev1.Pod{}
		devtest.Eventually(t, "the sentinel on "+p.Name, func() bool {
			return e.c.Get(ctx, client.ObjectKeyFromObject(p), got) == nil && got.Annotations["portal.io/sentinel"] == "yes"
		})
		if _, ok := got.Annotations["portal.io/flagged"]; ok {
			t.Errorf("pod %s annotated: an exempted finding fired its action", p.Name)
		}
	}
}
