package clustercache

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the cache's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	informers   *prometheus.GaugeVec
	users       *prometheus.GaugeVec
	watches     *prometheus.CounterVec
	reconnects  *prometheus.CounterVec
	watchErrors *prometheus.CounterVec
	objects     *prometheus.GaugeVec
	bytes       *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		informers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_cluster_cache_informers",
			Help: "Informers the cluster cache runs now, by resource and scope: cluster (every namespace) or namespace (one per namespace a consumer asked for).",
		}, []string{"resource", "scope"}),
		users: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_cluster_cache_users",
			Help: "Handles consumers (audit, lookups, network) hold on the cluster cache's informers, by resource and scope; an informer stops when its last handle is released.",
		}, []string{"resource", "scope"}),
		watches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_cluster_cache_watches_total",
			Help: "Watch requests the cluster cache's informers opened, by resource: one per informer start, plus reconnects. Consumers of one resource share one watch.",
		}, []string{"resource"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_cluster_cache_watch_reconnects_total",
			Help: "Watches the cluster cache's informers re-opened after their initial sync, by resource: server-side watch timeouts, dropped connections, API server restarts.",
		}, []string{"resource"}),
		watchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_cluster_cache_watch_errors_total",
			Help: "Failed lists and watches of the cluster cache's informers (each retried with backoff), by resource and reason: forbidden (RBAC denies Portal the resource), not_found, expired, other.",
		}, []string{"resource", "reason"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_cluster_cache_objects",
			Help: "Objects the cluster cache holds now, by resource.",
		}, []string{"resource"}),
		bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_cluster_cache_object_bytes",
			Help: "Bytes of compact (deflated) JSON the cluster cache holds now, by resource: the part of its heap that grows with the objects users create.",
		}, []string{"resource"}),
	}
	if reg != nil {
		reg.MustRegister(m.informers, m.users, m.watches, m.reconnects, m.watchErrors, m.objects, m.bytes)
	}
	return m
}

// setInformersLocked sets the gauges from the running informers; the caller
// holds Cache.mu.
func (m *Metrics) setInformersLocked(infs map[Scope]*informer) {
	m.informers.Reset()
	m.users.Reset()
	for s, inf := range infs {
		m.informers.WithLabelValues(s.resourceLabel(), s.scopeLabel()).Inc()
		m.users.WithLabelValues(s.resourceLabel(), s.scopeLabel()).Add(float64(inf.refs))
	}
}
