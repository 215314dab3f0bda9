package cache

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the cache's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Requests  *prometheus.CounterVec
	Duration  prometheus.Histogram
	Entries   prometheus.Gauge
	Bytes     prometheus.Gauge
	Evictions *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_cache_requests_total",
			Help: "Requests to the rule set cache server, by HTTP status code.",
		}, []string{"code"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portal_waf_cache_request_duration_seconds",
			Help:    "Time to answer a request to the rule set cache server.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}),
		Entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_waf_cache_entries",
			Help: "Rule set revisions held in the cache, latest and older.",
		}),
		Bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_waf_cache_bytes",
			Help: "Total size of the rule set revisions held in the cache (rules and data files), in bytes.",
		}),
		Evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_cache_evictions_total",
			Help: "Rule set revisions evicted by the cache garbage collector, by reason (age or size).",
		}, []string{"reason"}),
	}
	for _, r := range []string{"age", "size"} {
		m.Evictions.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Duration, m.Entries, m.Bytes, m.Evictions)
	}
	return m
}
