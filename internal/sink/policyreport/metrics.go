package policyreport

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the sink's Prometheus metrics.
type Metrics struct {
	Writes *prometheus.CounterVec
	Errors prometheus.Counter
	Size   prometheus.Histogram
	// WriteSeconds is the time one write took, answered by the API server.
	WriteSeconds *prometheus.HistogramVec
	// Dropped is the number of results no report shows now.
	Dropped prometheus.Gauge
}

// NewMetrics creates the metrics of one report format and registers them
// with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer, format string) *Metrics {
	fl := prometheus.Labels{"format": format}
	m := &Metrics{
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "portal_policyreport_writes_total",
			Help:        "Report writes, by format (wgpolicyk8s, openreports) and operation (apply, delete).",
			ConstLabels: fl,
		}, []string{"op"}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "portal_policyreport_write_errors_total",
			Help:        "Report writes that failed (retried), by format.",
			ConstLabels: fl,
		}),
		Size: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "portal_policyreport_size_bytes",
			Help:        "Encoded size of the reports applied, by format.",
			Buckets:     prometheus.ExponentialBuckets(1024, 2, 11),
			ConstLabels: fl,
		}),
		WriteSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "portal_policyreport_write_duration_seconds",
			Help:        "Time one report write took, from request to the API server's answer, by format and operation (apply, delete).",
			Buckets:     []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
			ConstLabels: fl,
		}, []string{"op"}),
		Dropped: prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "portal_policyreport_results_dropped",
			Help:        "Results no report shows now: cut because one object's results exceed a report's byte limit, by format.",
			ConstLabels: fl,
		}),
	}
	m.Writes.WithLabelValues("apply")
	m.Writes.WithLabelValues("delete")
	if reg != nil {
		reg.MustRegister(m.Writes, m.Errors, m.Size, m.WriteSeconds, m.Dropped)
	}
	return m
}
