package audit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// LatencyBuckets are the buckets of portal_audit_event_to_report_seconds:
// from an informer event to the sink having written (or sent) the result.
// 200 ms and 1 s are bounds, so the latency goal and budget read exactly.
var LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 30}

// Scopes of portal_audit_informers.
const (
	scopeCluster   = "cluster"
	scopeNamespace = "namespace"
)

// Metrics are the audit layer's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Events        *prometheus.CounterVec
	Resyncs       prometheus.Counter
	Watched       prometheus.Gauge
	Informers     *prometheus.GaugeVec
	QueueDepth    prometheus.Gauge
	Evaluations   prometheus.Counter
	RuleErrors    *prometheus.CounterVec
	EventToReport *prometheus.HistogramVec
	SinkErrors    *prometheus.CounterVec
	SinkObjects   *prometheus.CounterVec
	Leader        prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_audit_events_total",
			Help: "Informer events the audit layer received, by event (add, update, delete, relist: an unchanged object listed again after a watch broke). Resyncs are counted in portal_audit_resyncs_total instead.",
		}, []string{"event"}),
		Resyncs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_audit_resyncs_total",
			Help: "Objects re-queued by the periodic resync (the safety net), as opposed to watch events.",
		}),
		Watched: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_audit_watched_resources",
			Help: "Resources (group, version, resource) the audit layer watches now, cluster-wide or in some namespaces.",
		}),
		Informers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_audit_informers",
			Help: "Informers the audit layer runs now, by resource and scope: cluster (one watch of every namespace, for a kind a cluster-wide rule audits) or namespace (one per namespace whose PortalRules audit a kind no cluster-wide rule does).",
		}, []string{"resource", "scope"}),
		QueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_audit_queue_depth",
			Help: "Objects waiting in the audit work queue for evaluation.",
		}),
		Evaluations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_audit_evaluations_total",
			Help: "Objects the audit workers evaluated.",
		}),
		RuleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_audit_rule_errors_total",
			Help: "Rule evaluations that failed with an error during audit, by rule.",
		}, []string{"rule"}),
		EventToReport: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portal_audit_event_to_report_seconds",
			Help:    "Time from the informer event that changed an object's findings to the sink having written or sent them, by sink.",
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
			Help: "1 while this replica leads and each leader-only sink (reports, alerts, logs) has published the full state, else 0.",
		}),
	}
	for _, e := range []string{"add", "update", "delete", "relist"} {
		m.Events.WithLabelValues(e)
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Resyncs, m.Watched, m.Informers, m.QueueDepth,
			m.Evaluations, m.RuleErrors, m.EventToReport, m.SinkErrors, m.SinkObjects, m.Leader)
	}
	return m
}
