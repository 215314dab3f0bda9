package rule_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/rule"
)

// TestViolationCountFollowsPromptly: a rule's VIOLATIONS column lagged its
// PolicyReport by up to the count interval, which its evaluations keep
// restarting. A change of the number of violations is written within about
// a second of the last write, whatever the interval (an hour here).
func TestViolationCountFollowsPromptly(t *testing.T) {
	cluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pcr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: "counted"},
		Spec: policyv1alpha1.RuleSpec{Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "ConfigMap"}}}, Rule: "true"}}
	if err := env.client.Create(ctx, pcr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), pcr) })
	counts := rule.NewStatusCounts(env.client, rule.CountOptions{Interval: time.Hour})
	go func() { _ = counts.Start(ctx) }()
	r := &core.Rule{Name: "counted", Source: core.Source{Kind: rule.KindCluster, Name: "counted"}}
	waitViolations := func(want int64) {
		t.Helper()
		var got policyv1alpha1.PortalClusterRule
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := env.client.Get(ctx, client.ObjectKeyFromObject(pcr), &got)
			return err == nil && got.Status.ViolationCount == want, nil
		})
		if err != nil {
			t.Fatalf("status.violationCount %d, want %d within seconds though the count interval is an hour", got.Status.ViolationCount, want)
		}
	}
	counts.Evaluated(r)
	counts.SetViolations(r, 1)
	waitViolations(1)
	counts.Evaluated(r)
	counts.SetViolations(r, 2)
	waitViolations(2)
}

// TestCountIntervalRunsOnTheInjectedClock: a rule evaluated again within
// its count interval is written when the interval has passed on the
// writer's clock, so a test (or a replica whose clock is stepped) never
// waits out an hour of wall time.
func TestCountIntervalRunsOnTheInjectedClock(t *testing.T) {
	cluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pcr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: "clocked"},
		Spec: policyv1alpha1.RuleSpec{Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "ConfigMap"}}}, Rule: "true"}}
	if err := env.client.Create(ctx, pcr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), pcr) })
	clk := clocktesting.NewFakeClock(time.Now())
	counts := rule.NewStatusCounts(env.client, rule.CountOptions{Interval: time.Hour, Clock: clk})
	go func() { _ = counts.Start(ctx) }()
	r := &core.Rule{Name: "clocked", Source: core.Source{Kind: rule.KindCluster, Name: "clocked"}}
	var got policyv1alpha1.PortalClusterRule
	evalCount := func(ctx context.Context) int64 {
		if err := env.client.Get(ctx, client.ObjectKeyFromObject(pcr), &got); err != nil {
			return -1
		}
		return got.Status.EvalCount
	}
	// Evaluations before the writer starts belong to the leader before
	// it: evaluate until the first write shows one.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		counts.Evaluated(r)
		return evalCount(ctx) >= 1, nil
	})
	if err != nil {
		t.Fatalf("status.evalCount %d, want a first write", got.Status.EvalCount)
	}
	first := got.Status.EvalCount
	counts.Evaluated(r)
	// The next write waits out the interval on the fake clock: step it
	// until the writer's queue has seen the hour pass.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		clk.Step(time.Hour)
		return evalCount(ctx) > first, nil
	})
	if err != nil {
		t.Fatalf("status.evalCount still %d after the interval passed on the injected clock", got.Status.EvalCount)
	}
}
