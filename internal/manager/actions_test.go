package manager

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// TestActionsLayer runs audit and the actions layer together: a PortalRule's
// label action labels the violating pod in its namespace, and removes the
// label when the pod is fixed; the same violation in another namespace is
// not the rule's to act on; the rule says its actions can run.
func TestActionsLayer(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	c := clusterClient(t, cl, "actions-team", "actions-other")
	cfg, _, _ := layerConfig(t, "layers-actions")
	cfg.Namespace = "actions-portal"
	cfg.Audit.Enabled = true
	if err := cfg.Sinks.Parse("--report-format=none"); err != nil {
		t.Fatal(err)
	}
	cfg.Actions.Enabled = true
	cfg.Actions.Types = []string{"label"}
	rule := &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: "actions-team", Name: "flag-bad"},
		Spec: policyv1alpha1.RuleSpec{
			Mode:    []policyv1alpha1.Mode{"audit"},
			Match:   policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "Pod"}}},
			Rule:    `metadata.labels?.bad == "yes"`,
			Actions: []policyv1alpha1.Action{{Type: "label", Key: "portal.io/flagged", Value: "true"}},
		},
	}
	if err := c.Create(ctx, rule); err != nil {
		t.Fatal(err)
	}
	runUntilReady(t, cl, cfg)

	pod := func(ns string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"bad": "yes"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine, theirs := pod("actions-team"), pod("actions-other")
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	flagged := func(p *corev1.Pod) string {
		got := &corev1.Pod{}
		if c.Get(ctx, client.ObjectKeyFromObject(p), got) != nil {
			return "?"
		}
		return got.Labels["portal.io/flagged"]
	}
	poll("the label on the violating pod", func() bool { return flagged(mine) == "true" })
	poll("ActionsReady on the rule", func() bool {
		got := &policyv1alpha1.PortalRule{}
		if c.Get(ctx, client.ObjectKeyFromObject(rule), got) != nil {
			return false
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, policyv1alpha1.ConditionActionsReady)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == policyv1alpha1.ReasonActionsRunnable
	})
	if f := flagged(theirs); f != "" {
		t.Fatalf("the PortalRule in actions-team labelled a pod in actions-other: %q", f)
	}

	// Fixed: the finding clears and the label goes.
	fixed := mine.DeepCopy()
	devtest.Update(t, c, fixed, func() { fixed.Labels["bad"] = "no" })
	poll("the label removed after the fix", func() bool { return flagged(mine) == "" })
}
