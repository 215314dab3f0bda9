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
