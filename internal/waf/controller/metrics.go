package controller

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the RuleSet compiler's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Compiles *prometheus.CounterVec
	Duration prometheus.Histogram
}

// Results of a RuleSet reconcile, the values of the result label.
const (
	ResultCached      = "cached"
	ResultUnchanged   = "unchanged"
	ResultInvalid     = "invalid"
	ResultSandbox     = "sandbox"
	ResultMissingRefs = "missing"
)

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Compiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_ruleset_compiles_total",
			Help: "RuleSet reconciles by result: cached (a new revision), unchanged, invalid, sandbox (rejected by the sandbox) or missing (a RuleSource or RuleData is missing).",
		}, []string{"result"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portal_waf_ruleset_compile_duration_seconds",
			Help:    "Time to check and compile a RuleSet with Coraza.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
	}
	for _, r := range []string{ResultCached, ResultUnchanged, ResultInvalid, ResultSandbox, ResultMissingRefs} {
		m.Compiles.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Compiles, m.Duration)
	}
	return m
}
