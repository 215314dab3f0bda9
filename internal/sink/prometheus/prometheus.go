// Package prometheus is the metrics sink: the portal_audit_violations gauge,
// the number of open violations by rule, severity, namespace and producer.
package prometheus

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/track"
)

// Name is the sink's name.
const Name = "prometheus"

type series struct {
	rule, severity, namespace, producer string
}

// Sink keeps portal_audit_violations. Unlike the other sinks it runs on every
// replica: each exports the same values from its own evaluation, so the
// gauge survives a failover without a gap. Aggregate with max, not sum.
type Sink struct {
	gauge   *prometheus.GaugeVec
	tracker *track.Tracker
	counts  map[series]int
}

// New returns the sink and registers its gauge with reg (nil: not
// registered).
func New(reg prometheus.Registerer) *Sink {
	s := &Sink{
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_audit_violations",
			Help: "Open violations (failing findings) by rule, severity, namespace (empty for cluster-scoped objects) and producer (audit, ...).",
		}, []string{"rule", "severity", "namespace", "producer"}),
		tracker: track.New(),
		counts:  map[series]int{},
	}
	if reg != nil {
		reg.MustRegister(s.gauge)
	}
	return s
}

// Name implements core.OutputSink.
func (s *Sink) Name() string { return Name }

// NeedLeaderElection makes the sink run on every replica.
func (s *Sink) NeedLeaderElection() bool { return false }

// Gauge returns the gauge, for tests.
func (s *Sink) Gauge() *prometheus.GaugeVec { return s.gauge }

// Publish implements core.OutputSink.
func (s *Sink) Publish(_ context.Context, b core.FindingBatch) error {
	touched := map[series]bool{}
	for _, d := range s.tracker.Apply(b) {
		s.add(d.Old, -1, touched)
		s.add(d.New, +1, touched)
	}
	for k := range touched {
		if n := s.counts[k]; n > 0 {
			s.gauge.WithLabelValues(k.rule, k.severity, k.namespace, k.producer).Set(float64(n))
		} else {
			delete(s.counts, k)
			s.gauge.DeleteLabelValues(k.rule, k.severity, k.namespace, k.producer)
		}
	}
	return nil
}

func (s *Sink) add(fs []core.Finding, delta int, touched map[series]bool) {
	for i := range fs {
		f := &fs[i]
		if f.Outcome != core.OutcomeFail {
			continue
		}
		k := series{rule: f.RuleName(), severity: string(f.Severity()), namespace: f.Resource.Namespace, producer: f.Producer}
		s.counts[k] += delta
		touched[k] = true
	}
}
