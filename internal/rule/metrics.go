package rule

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the rule loaders' Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Loaded     *prometheus.GaugeVec
	LoadErrors *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, for tests and offline tools).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Loaded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_rules_loaded",
			Help: "Rules currently loaded, by source (folder or cr).",
		}, []string{"source"}),
		LoadErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_rule_load_errors_total",
			Help: "Rules that failed to parse or compile, by source (folder or cr).",
		}, []string{"source"}),
	}
	if reg != nil {
		reg.MustRegister(m.Loaded, m.LoadErrors)
	}
	return m
}
