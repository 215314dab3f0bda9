package actions_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// TestRuntimeVerdictsActOnceAndStay: a runtime verdict is checked like an
// admission verdict (another UID is skipped), runs only the actions of
// mode runtime, and what it did stays: the runtime finding that opens and
// closes around it in the findings pipeline neither acts again nor undoes
// the label.
func TestRuntimeVerdictsActOnceAndStay(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	ns := e.namespace("runtime-verdict")
	victim := e.pod(ns, "victim", nil)
	audit := spec("annotate", "key", "portal.io/audit-only", "value", "yes")
	audit.Modes = []core.Mode{core.ModeAudit}
	r := clusterRule("runtime-verdict", spec("label", "key", "portal.io/quarantine", "value", "true"), audit)
	r.Modes = []core.Mode{core.ModeRuntime}
	offer := func(uid string) {
		ref := podRef(victim)
		ref.UID = uid
		e.eng.Offer(core.Verdict{Result: core.Result{Rule: r, Resource: ref, Outcome: core.OutcomeFail}, Mode: core.ModeRuntime, Observed: time.Now()})
	}
	devtest.Eventually(t, "the engine running", func() bool { return actions.Running(e.eng) })
	t.Cleanup(func() { dump(t, e) })

	offer("6b1f3c52-0000-4000-8000-000000000031")
	devtest.Eventually(t, "the verdict about another pod", func() bool { return len(e.log.lines("label", "victim")) == 1 })
	offer(string(victim.UID))
	devtest.Eventually(t, "the verdict about the live pod", func() bool { return len(e.log.lines("label", "victim")) == 2 })
	if got := results(e.log.lines("label", "victim")); got != "skipped,success" {
		t.Fatalf("label results %s, want skipped for the other UID, success for the live pod", got)
	}

	// The runtime finding opens and, its window over, closes.
	finding := core.Finding{Result: core.Result{Rule: r, Resource: podRef(victim), Outcome: core.OutcomeFail}, Producer: "runtime"}
	for _, fs := range [][]core.Finding{{finding}, nil} {
		if err := e.eng.Publish(ctx, core.FindingBatch{Objects: []core.ObjectFindings{{Object: podRef(victim), Findings: fs}}}); err != nil {
			t.Fatal(err)
		}
	}
	// A sentinel on the same pod's worker: once it ran, anything the
	// batches queued before it has too.
	sentinel := clusterRule("runtime-sentinel", spec("annotate", "key", "portal.io/sentinel", "value", "yes"))
	sentinel.Modes = []core.Mode{core.ModeRuntime}
	e.eng.Offer(core.Verdict{Result: core.Result{Rule: sentinel, Resource: podRef(victim), Outcome: core.OutcomeFail}, Mode: core.ModeRuntime, Observed: time.Now()})
	devtest.Eventually(t, "the sentinel", func() bool { return len(e.log.lines("annotate", "victim")) == 1 })
	if got := results(e.log.lines("label", "victim")); got != "skipped,success" {
		t.Errorf("label results %s after the finding opened and closed, want no more attempts", got)
	}
	live := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(victim), live); err != nil {
		t.Fatal(err)
	}
	if live.Labels["portal.io/quarantine"] != "true" || live.Annotations["portal.io/audit-only"] != "" {
		t.Errorf("labels %v, annotations %v: want the quarantine label kept and no audit-only action", live.Labels, live.Annotations)
	}
}

// TestRuntimeRevokeOnceAcrossALeaderChange: the replica that leads after a
// failover remembers nothing of what the old leader did, and the API server
// sends it the batch the old leader already acted on. The revoke-sa-token
// verdict names the acting ServiceAccount by the UID the event carried, so
// the new leader finds the account the old one recreated (a new UID) and
// skips: the account is recreated once, not once per leader.
func TestRuntimeRevokeOnceAcrossALeaderChange(t *testing.T) {
	ctx := context.Background()
	old := start(t, nil)
	ns := old.namespace("runtime-failover")
	sa := &corev1.ServiceAccount{}
	sa.Namespace, sa.Name = ns, "ci"
	if err := old.c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	r := clusterRule("revoke-on-exec", spec("revoke-sa-token", "recreateServiceAccount", "true"))
	r.Modes = []core.Mode{core.ModeRuntime}
	verdict := core.Verdict{Result: core.Result{Rule: r, Outcome: core.OutcomeFail,
		Resource: core.ResourceRef{APIVersion: "v1", Kind: "ServiceAccount", Namespace: ns, Name: "ci", UID: string(sa.UID)}},
		Mode: core.ModeRuntime, Observed: time.Now()}
	uid := func() string {
		live := &corev1.ServiceAccount{}
		if err := old.c.Get(ctx, client.ObjectKeyFromObject(sa), live); err != nil {
			return ""
		}
		return string(live.UID)
	}
	devtest.Eventually(t, "the old leader running", func() bool { return actions.Running(old.eng) })
	old.eng.Offer(verdict)
	devtest.Eventually(t, "the old leader's revoke", func() bool { return len(old.log.lines("revoke-sa-token", "ci")) == 1 })
	if got := results(old.log.lines("revoke-sa-token", "ci")); got != "success" {
		t.Fatalf("the old leader's revoke: %s, want success", got)
	}
	recreated := uid()
	if recreated == "" || recreated == string(sa.UID) {
		t.Fatalf("the ServiceAccount was not recreated (UID %q)", recreated)
	}

	next := start(t, nil)
	devtest.Eventually(t, "the new leader running", func() bool { return actions.Running(next.eng) })
	next.eng.Offer(verdict)
	devtest.Eventually(t, "the new leader's attempt", func() bool { return len(next.log.lines("revoke-sa-token", "ci")) == 1 })
	if got := results(next.log.lines("revoke-sa-token", "ci")); got != "skipped" {
		t.Errorf("the new leader's attempt on the retried event: %s, want skipped", got)
	}
	if got := uid(); got != recreated {
		t.Errorf("the ServiceAccount was recreated again after the leader change (UID %s, was %s)", got, recreated)
	}
}
