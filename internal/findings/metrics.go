package findings

import (
	"github.com/prometheus/client_golang/prometheus"
)

// LatencyBuckets are the buckets of portal_audit_event_to_report_seconds:
// from the event that changed an object's findings to the sink having
// written (or sent) the result. 200 ms and 1 s are bounds, so the latency
// goal and budget read exactly.
var LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 30}

// Metrics are the pipeline's Prometheus metrics, documented in
// docs/reference/metrics.md. The sink metrics keep the portal_audit_ names
// they had when audit was the only producer, so dashboards and alerts keep
// working.
type Metrics struct {
	EventToReport *prometheus.HistogramVec
	SinkErrors    *prometheus.CounterVec
	SinkObjects   *prometheus.CounterVec
	Leader        prometheus.Gauge
	Objects       *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		EventToReport: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portal_audit_event_to_report_seconds",
			Help:    "Time from the event that changed an object's findings (for audit, the informer event) to the sink having written or sent them, by sink.",
			Buckets: LatencyBuckets,
		}, []string{"sink"}),
		SinkErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_audit_sink_errors_total",
			Help: "Batches a sink failed to publish (retried with backoff), by sink.",
		}, []string{"sink"}),
		SinkObjects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_audit_sink_objects_total",
			Help: "Object states a sink published, by sink.",
		}, []string{"sink"}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_audit_leader",
			Help: "1 while this replica leads and each leader-only sink (reports, alerts, logs) has published the full state of every producer, else 0.",
		}),
		Objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_findings_objects",
			Help: "Objects with open findings in the findings pipeline, by producer (audit, ...).",
		}, []string{"producer"}),
	}
	if reg != nil {
		reg.MustRegister(m.EventToReport, m.SinkErrors, m.SinkObjects, m.Leader, m.Objects)
	}
	return m
}
