package audit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/findings"
)

// LatencyBuckets are the buckets of portal_audit_event_to_report_seconds,
// which the findings pipeline keeps.
var LatencyBuckets = findings.LatencyBuckets

// Scopes of portal_audit_informers.
const (
	scopeCluster   = "cluster"
	scopeNamespace = "namespace"
)

// Metrics are the audit layer's Prometheus metrics, documented in
// docs/reference/metrics.md. The sink metrics that kept their portal_audit_
// names (event to report, sink errors and objects, leader) belong to the
// findings pipeline.
type Metrics struct {
	Events     *prometheus.CounterVec
	Resyncs    prometheus.Counter
	Watched    prometheus.Gauge
	Informers  *prometheus.GaugeVec
	QueueDepth prometheus.Gauge
	// QueueNamespaces counts the namespaces with objects queued: the
	// round the workers serve one object of each at a time.
	QueueNamespaces prometheus.Gauge
	Evaluations     prometheus.Counter
	RuleErrors      *prometheus.CounterVec
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
		QueueNamespaces: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_audit_queue_namespaces",
			Help: "Namespaces (cluster-scoped objects count as one) with objects waiting in the audit work queue; the workers take one object of each in turn.",
		}),
		Evaluations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_audit_evaluations_total",
			Help: "Objects the audit workers evaluated.",
		}),
		RuleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_audit_rule_errors_total",
			Help: "Rule evaluations that failed with an error during audit, by rule.",
		}, []string{"rule"}),
	}
	for _, e := range []string{"add", "update", "delete", "relist"} {
		m.Events.WithLabelValues(e)
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Resyncs, m.Watched, m.Informers, m.QueueDepth, m.QueueNamespaces,
			m.Evaluations, m.RuleErrors)
	}
	return m
}
