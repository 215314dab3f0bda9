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
}

var (
	objectsDesc = prometheus.NewDesc("portal_cluster_cache_objects",
		"Objects the cluster cache holds now, by resource.", []string{"resource"}, nil)
	bytesDesc = prometheus.NewDesc("portal_cluster_cache_object_bytes",
		"Bytes of compact (deflated) JSON the cluster cache holds now, by resource: the part of its heap that grows with the objects users create.", []string{"resource"}, nil)
)

func newMetrics(c *Cache, reg prometheus.Registerer) *Metrics {
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
	}
	if reg != nil {
		reg.MustRegister(m.informers, m.users, m.watches, m.reconnects, m.watchErrors, &sizeCollector{c: c})
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

// sizeCollector reports what the informers hold when scraped, so the cache
// pays nothing per event for it.
type sizeCollector struct{ c *Cache }

func (s *sizeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- objectsDesc
	ch <- bytesDesc
}

func (s *sizeCollector) Collect(ch chan<- prometheus.Metric) {
	s.c.mu.Lock()
	infs := make([]*informer, 0, len(s.c.informers))
	for _, inf := range s.c.informers {
		infs = append(infs, inf)
	}
	s.c.mu.Unlock()
	objects, bytes := map[string]int{}, map[string]int{}
	for _, inf := range infs {
		label := inf.scope.resourceLabel()
		for _, it := range inf.inf.GetStore().List() {
			if o, ok := it.(*Object); ok {
				objects[label]++
				bytes[label] += o.Size()
			}
		}
	}
	for label, n := range objects {
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(n), label)
		ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.GaugeValue, float64(bytes[label]), label)
	}
}
