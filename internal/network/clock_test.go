package network_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/network"
)

// TestAnalyserTimeIsItsClock: the analyser's time is Options.Clock. A
// finding is first seen, and its report result stamped, at the clock's
// time (not the wall clock's), and the safety-net resync re-analyses every
// namespace when the clock has moved on by ResyncPeriod, with no waiting.
func TestAnalyserTimeIsItsClock(t *testing.T) {
	c := cluster(t)
	then := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	fake := clocktesting.NewFakeClock(then)
	inst := startOpts(t, nil, network.Options{Config: network.DefaultConfig(), Clock: fake, ResyncPeriod: time.Hour})

	ns := namespace(t, c, "np-clock")
	create(t, c, pod(ns, "web", map[string]string{"app": "web"}))
	key := core.ObjectKey{APIVersion: "v1", Kind: "Namespace", Name: ns}
	var first time.Time
	eventually(t, 20*time.Second, "default-deny-missing on "+ns, func() (bool, error) {
		for _, of := range inst.pipe.Snapshot() {
			if of.Object.Key() == key && len(of.Findings) > 0 {
				first = of.Findings[0].FirstSeen
				return true, nil
			}
		}
		return false, nil
	})
	if !first.Equal(then) {
		t.Errorf("finding first seen at %s, want the analyser's clock's %s", first, then)
	}
	eventually(t, 20*time.Second, "the ClusterPolicyReport result of "+ns, func() (bool, error) {
		var cprs reportsv1alpha2.ClusterPolicyReportList
		if err := c.List(context.Background(), &cprs); err != nil {
			return false, nil
		}
		for _, r := range cprs.Items {
			for _, res := range r.Results {
				if len(res.Resources) == 1 && res.Resources[0].Name == ns && res.Policy == network.CheckDefaultDenyMissing {
					if res.Timestamp.Seconds != then.Unix() {
						t.Fatalf("report result stamped %d, want the clock's %d", res.Timestamp.Seconds, then.Unix())
					}
					return true, nil
				}
			}
		}
		return false, nil
	})

	// Every namespace is analysed once more when the clock passes the
	// resync period: the resync ticks on the analyser's clock.
	var namespaces float64
	eventually(t, 20*time.Second, "the resync ticker on the fake clock", func() (bool, error) {
		var list corev1.NamespaceList
		if err := c.List(context.Background(), &list); err != nil {
			return false, nil
		}
		namespaces = float64(len(list.Items))
		return fake.HasWaiters() && inst.counter(t, "portal_network_queue_depth") == 0, nil
	})
	before := inst.counter(t, "portal_network_analyses_total")
	fake.Step(time.Hour)
	eventually(t, 20*time.Second, "a resync analysis of every namespace", func() (bool, error) {
		return inst.counter(t, "portal_network_analyses_total")-before >= namespaces, nil
	})
}
