package network

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the analyser's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Analyses  prometheus.Counter
	Duration  prometheus.Histogram
	Truncated prometheus.Counter
	Findings  *prometheus.GaugeVec
	Queued    prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Analyses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_network_analyses_total",
			Help: "Namespace analyses the NetworkPolicy analyser ran: one per namespace an event touched (coalesced while queued), never one per namespace of the cluster.",
		}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portal_network_analysis_duration_seconds",
			Help:    "Time one namespace's NetworkPolicy analysis took.",
			Buckets: []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5},
		}),
		Truncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_network_analyses_truncated_total",
			Help: "Namespace analyses that read --network-max-pod-visits pods and namespaces and left selectors unchecked (no finding raised for them).",
		}),
		Findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_network_findings",
			Help: "Open NetworkPolicy analyser findings, by check.",
		}, []string{"check"}),
		Queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_network_queue_depth",
			Help: "Namespaces waiting for analysis.",
		}),
	}
	for _, c := range Checks() {
		m.Findings.WithLabelValues(c)
	}
	if reg != nil {
		reg.MustRegister(m.Analyses, m.Duration, m.Truncated, m.Findings, m.Queued)
	}
	return m
}
