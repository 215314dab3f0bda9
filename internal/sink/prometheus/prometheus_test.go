package prometheus_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vilaca/portal/internal/core"
	promsink "github.com/vilaca/portal/internal/sink/prometheus"
)

var rule = &core.Rule{Name: "r", Severity: core.SeverityHigh}

func obj(ns, name string, n int) core.ObjectFindings {
	ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name}
	of := core.ObjectFindings{Object: ref}
	for i := range n {
		of.Findings = append(of.Findings, core.Finding{
			Producer:  "audit",
			Result:    core.Result{Rule: rule, Resource: ref, Outcome: core.OutcomeFail, Container: string(rune('a' + i))},
			FirstSeen: time.Now(),
		})
	}
	return of
}

// The gauge counts open violations by rule, severity, namespace and
// producer, and a
// series disappears with its last violation.
func TestViolationsGauge(t *testing.T) {
	s := promsink.New(nil)
	ctx := context.Background()
	if err := s.Publish(ctx, core.FindingBatch{Full: true, Objects: []core.ObjectFindings{obj("a", "p", 2), obj("a", "q", 1), obj("b", "p", 1)}}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.Gauge().WithLabelValues("r", "high", "a", "audit")); got != 3 {
		t.Errorf("namespace a: %v, want 3", got)
	}
	if err := s.Publish(ctx, core.FindingBatch{Objects: []core.ObjectFindings{obj("a", "p", 0)}}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.Gauge().WithLabelValues("r", "high", "a", "audit")); got != 1 {
		t.Errorf("namespace a after a fix: %v, want 1", got)
	}
	// A full batch without namespace b resolves it: its series goes.
	if err := s.Publish(ctx, core.FindingBatch{Full: true, Objects: []core.ObjectFindings{obj("a", "q", 1)}}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(s.Gauge()); n != 1 {
		t.Errorf("%d series, want 1", n)
	}
}
