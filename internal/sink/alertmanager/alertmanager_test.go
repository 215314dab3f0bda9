package alertmanager_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/alertmanager"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

var rule = &core.Rule{Name: "no-root", Severity: core.SeverityHigh, Alert: "InsecureWorkload", Source: core.Source{Kind: "PortalClusterRule", Name: "no-root"}}

func object(ns, name string, failing bool, at time.Time) core.ObjectFindings {
	ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name}
	of := core.ObjectFindings{Object: ref, Observed: at}
	if failing {
		of.Findings = []core.Finding{{
			Result:    core.Result{Rule: rule, Resource: ref, Outcome: core.OutcomeFail, Container: "app", Message: name + " runs as root"},
			FirstSeen: at,
		}}
	}
	return of
}

func start(t *testing.T, o alertmanager.Options) (*alertmanager.Sink, *atomic.Int64) {
	t.Helper()
	s, err := alertmanager.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	delivered := &atomic.Int64{}
	go func() {
		defer close(done)
		s.Run(ctx, func(time.Time) { delivered.Add(1) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s, delivered
}

func waitAlerts(t *testing.T, am *amtest.Server, ns string, want []string) {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		keys, err := am.AlertKeys(ns)
		if err != nil {
			return false, nil
		}
		got = slices.Sorted(maps.Keys(keys))
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("alerts of %s: got %v, want %v", ns, got, want)
	}
}

// The alert carries the finding's labels, annotation and first sight;
// resolving the finding resolves the alert.
func TestAlertShapeAndResolution(t *testing.T) {
	am := amtest.Start(t)
	s, delivered := start(t, alertmanager.Options{URL: am.URL(), ResendInterval: time.Minute})
	first := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := s.Publish(context.Background(), core.FindingBatch{Full: true, Objects: []core.ObjectFindings{object("shape", "p", true, first)}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "shape", []string{"no-root/p/app"})
	as, err := am.Alerts("shape")
	if err != nil {
		t.Fatal(err)
	}
	a := as[0]
	want := map[string]string{"alertname": "InsecureWorkload", "rule": "no-root", "severity": "high", "namespace": "shape", "kind": "Pod", "name": "p", "container": "app"}
	if !maps.Equal(a.Labels, want) {
		t.Errorf("labels = %v, want %v", a.Labels, want)
	}
	if a.Annotations["message"] != "p runs as root" || !a.StartsAt.Equal(first) {
		t.Errorf("message %q, startsAt %v; want %v", a.Annotations["message"], a.StartsAt, first)
	}
	if d := time.Until(a.EndsAt); d < 3*time.Minute || d > 5*time.Minute {
		t.Errorf("endsAt %v ahead, want four re-send intervals", d)
	}
	if err := s.Publish(context.Background(), core.FindingBatch{Objects: []core.ObjectFindings{object("shape", "p", false, time.Now())}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "shape", nil)
	// Alertmanager may show the resolution before the sink has counted the
	// delivery that caused it.
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return delivered.Load() >= 2, nil
	})
	if n := delivered.Load(); err != nil || n != 2 {
		t.Errorf("%d deliveries reported, want 2", n)
	}
}

// While Alertmanager is down the changes wait in a bounded buffer, the
// overflow is counted, and once it is back every open alert is delivered,
// the dropped ones included.
func TestBufferWhileDown(t *testing.T) {
	am := amtest.Start(t)
	s, _ := start(t, alertmanager.Options{URL: am.URL(), BufferSize: 3, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, ResendInterval: time.Hour})
	now := time.Now()
	if err := s.Publish(context.Background(), core.FindingBatch{Full: true, Objects: []core.ObjectFindings{object("down", "p0", true, now)}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "down", []string{"no-root/p0/app"})

	am.Stop()
	var b core.FindingBatch
	var want []string
	for i := 1; i <= 5; i++ {
		b.Objects = append(b.Objects, object("down", fmt.Sprintf("p%d", i), true, now))
		want = append(want, fmt.Sprintf("no-root/p%d/app", i))
	}
	b.Objects = append(b.Objects, object("down", "p0", false, now))
	if err := s.Publish(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.Metrics().Pending); got != 3 {
		t.Errorf("pending = %v, want the buffer size 3", got)
	}
	if got := testutil.ToFloat64(s.Metrics().Dropped); got != 3 {
		t.Errorf("dropped = %v, want 3 of 6 changes", got)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(s.Metrics().Failures) > 0, nil
	})
	if err != nil {
		t.Fatal("no failed send while Alertmanager is down")
	}
	if err := am.Start(); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "down", want)
}
