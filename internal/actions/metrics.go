package actions

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the engine's metrics.
type Metrics struct {
	// Actions counts attempts by action and result.
	Actions *prometheus.CounterVec
	// Dropped counts admission verdicts dropped before an attempt.
	Dropped *prometheus.CounterVec
	// Queued is the attempts waiting for a worker.
	Queued prometheus.Gauge
	// Latency is the time from the event behind a finding (or an
	// admission decision) to the action done.
	Latency *prometheus.HistogramVec
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_actions_total",
			Help: "Response action attempts by action and result (success, failure, blocked, skipped, denied, disabled, rate_limited, dry_run, duplicate).",
		}, []string{"action", "result"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_actions_dropped_total",
			Help: "Admission verdicts with actions dropped before an attempt, by reason (queue_full, not_leader).",
		}, []string{"reason"}),
		Queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_actions_queued",
			Help: "Response action attempts waiting for a worker.",
		}),
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portal_actions_latency_seconds",
			Help:    "Time from the event behind a finding, or the admission decision, to the response action done.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"action"}),
	}
	for _, c := range []prometheus.Collector{m.Actions, m.Dropped, m.Queued, m.Latency} {
		reg.MustRegister(c)
	}
	for _, r := range []string{"queue_full", "not_leader"} {
		m.Dropped.WithLabelValues(r)
	}
	return m
}
