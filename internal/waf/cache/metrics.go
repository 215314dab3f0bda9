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
	// Denied counts refused requests by reason (Deny* constants); Reviews
	// the TokenReviews and SubjectAccessReviews made (cache misses).
	Denied  *prometheus.CounterVec
	Reviews *prometheus.CounterVec
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
		Denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_cache_requests_denied_total",
			Help: "Requests to the rule set cache server refused, by reason (no_token, unauthenticated, forbidden, review_failed, overloaded).",
		}, []string{"reason"}),
		Reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_cache_reviews_total",
			Help: "TokenReviews (review=token) and SubjectAccessReviews (review=access) the rule set cache server made, by result (allowed, denied, error); decisions reused from its cache are not counted.",
		}, []string{"review", "result"}),
	}
	for _, r := range []string{"age", "size"} {
		m.Evictions.WithLabelValues(r)
	}
	for _, r := range []string{DenyNoToken, DenyUnauthenticated, DenyForbidden, DenyReviewFailed, DenyOverloaded} {
		m.Denied.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Duration, m.Entries, m.Bytes, m.Evictions, m.Denied, m.Reviews)
	}
	return m
}

func (m *Metrics) denied(reason string) {
	if m != nil {
		m.Denied.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) reviewed(review, result string) {
	if m != nil {
		m.Reviews.WithLabelValues(review, result).Inc()
	}
}
