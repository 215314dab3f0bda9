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

// TestTenantGuards: whatever findings reach the engine, a PortalRule acts
// only in its own namespace, sets only portal.io/ keys, and no rule evicts,
// quarantines or revokes in a protected namespace or Portal's own.
func TestTenantGuards(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	a := e.namespace("tenant-a")
	b := e.namespace("tenant-b")
	portal := e.namespace("portal-system")
	victim := e.pod(b, "victim", nil)
	own := e.pod(a, "own", nil)
	portalPod := e.pod(portal, "portal", nil)

	// A finding of tenant-a's rule on tenant-b's pod (a rule never matches
	// it, but the engine does not rely on that).
	cross := nsRule(a, "reach-out", spec("label", "key", "portal.io/owned", "value", "a"), spec("evict"))
	e.open(cross, podRef(victim))
	// tenant-a's rule with a key outside portal.io/ on its own pod.
	e.open(nsRule(a, "relabel", spec("label", "key", "app", "value", "payments")), podRef(own))
	// A cluster rule evicting in Portal's namespace.
	e.open(clusterRule("evict-all", spec("evict"), spec("revoke-sa-token"), spec("patch-networkpolicy")), podRef(portalPod))

	devtest.Eventually(t, "every attempt denied", func() bool {
		return e.count("label", actions.ResultDenied) == 2 && e.count("evict", actions.ResultDenied) == 2 &&
			e.count("revoke-sa-token", actions.ResultDenied) == 1 && e.count("patch-networkpolicy", actions.ResultDenied) == 1
	})
	for _, p := range []*corev1.Pod{victim, own, portalPod} {
		got := &corev1.Pod{}
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatalf("pod %s/%s evicted: %v", p.Namespace, p.Name, err)
		}
		if len(got.Labels) != 0 {
			t.Fatalf("pod %s/%s labelled: %v", p.Namespace, p.Name, got.Labels)
		}
	}
	if n := e.count("label", actions.ResultSuccess) + e.count("evict", actions.ResultSuccess); n != 0 {
		t.Fatalf("%v guarded actions ran", n)
	}
}

// TestFlappingObjectIsRateLimited: a finding that opens and clears over and
// over fires its action at most as often as the rate limit allows. The test
// publishes every state to the engine itself: the pipeline would coalesce
// them.
func TestFlappingObjectIsRateLimited(t *testing.T) {
	ctx := context.Background()
	e := startWith(t, func(o *actions.Options) { o.DefaultRateLimit = "3/h" }, false)
	ns := e.namespace("flapping")
	p := e.pod(ns, "flapper", nil)
	r := clusterRule("flap", spec("annotate", "key", "portal.io/flagged", "value", "yes"))
	ref := podRef(p)
	open := core.ObjectFindings{Object: ref, Findings: []core.Finding{{Result: core.Result{Rule: r, Resource: ref, Outcome: core.OutcomeFail}}}}
	closed := core.ObjectFindings{Object: ref}
	for range 20 {
		for _, st := range []core.ObjectFindings{open, closed} {
			if err := e.eng.Publish(ctx, core.FindingBatch{Objects: []core.ObjectFindings{st}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 3 applied and undone, 17 rate limited.
	devtest.Eventually(t, "every state handled", func() bool { return len(e.log.lines("annotate", "flapper")) == 3+3+17 })
	if got := e.count("annotate", actions.ResultRateLimited); got != 17 {
		t.Fatalf("rate_limited = %v, want 17 of 20 openings within the hour", got)
	}
}

// TestOfferNeverBlocks: admission's hand-over returns at once whatever the
// engine's state: not leading, or its queue full; each drop is counted.
func TestOfferNeverBlocks(t *testing.T) {
	eng, err := actions.New(actions.Options{QueueSize: 1, Registerer: newRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	r := clusterRule("warn", spec("label", "key", "portal.io/x", "value", "y"))
	v := core.Verdict{Result: core.Result{Rule: r, Outcome: core.OutcomeFail, Resource: core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: "a", Name: "p"}}, Operation: "CREATE", Observed: time.Now()}
	eng.Offer(v)
	if got := gaugeOf(eng.Metrics().Dropped.WithLabelValues("not_leader")); got != 1 {
		t.Fatalf("verdict offered to a non-leader: dropped{not_leader} = %v, want 1", got)
	}
	// Leading, but nothing drains the queue (the test holds no manager):
	// the second verdict finds it full.
	actions.MarkRunning(eng, true)
	done := make(chan struct{})
	go func() {
		for range 5 {
			eng.Offer(v)
		}
		close(done)
	}()
	// A deadline to fail by, not to wait for: five non-blocking offers
	// return in microseconds; one that blocks never does.
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Offer blocked on a full queue with nothing draining it")
	}
	if got := gaugeOf(eng.Metrics().Dropped.WithLabelValues("queue_full")); got != 4 {
		t.Fatalf("dropped{queue_full} = %v, want 4 of 5 verdicts with a queue of 1", got)
	}
}
