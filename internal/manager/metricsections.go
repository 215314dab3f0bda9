package manager

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/certs"
	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/exception"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/sink"
)

// MetricsSection is one section of the metrics index
// (docs/reference/metrics-index.md, written by hack/metricsdocs): what one
// shared component or one layer registers at start. Anchor is the section
// of docs/reference/metrics.md that explains them.
type MetricsSection struct {
	Name, Anchor string
	Register     func(prometheus.Registerer)
}

// MetricsSections lists the index's sections: the shared components', then
// each registered layer's own in registry order, so a new layer's metrics
// are indexed from the layer's own file and a new sink's from its
// registration, with no edit elsewhere.
func MetricsSections() []MetricsSection { return MetricsSectionsWith(sink.Registrations()) }

// MetricsSectionsWith is MetricsSections with sinks as the registered sinks.
func MetricsSectionsWith(sinks []sink.Registration) []MetricsSection {
	out := []MetricsSection{
		{"Rule loading", "rule-loading", func(r prometheus.Registerer) {
			rule.NewMetrics(r)
			rule.NewBudgetStatus(nil, nil, rule.BudgetOptions{Registerer: r})
		}},
		{"Exceptions", "exceptions", func(r prometheus.Registerer) { exception.NewMetrics(r) }},
		{"Certificates", "certificates", func(r prometheus.Registerer) { certs.NewMetrics(r) }},
		{"Cluster cache", "cluster-cache", func(r prometheus.Registerer) { clustercache.NewMetrics(r) }},
		{"Cross-resource lookups", "cross-resource-lookups", func(r prometheus.Registerer) { lookup.NewMetrics(r, lookup.NewDepIndex(1)) }},
		// Every producer's findings go through them; metrics.md explains
		// them with audit, their first producer.
		{"Findings pipeline and sinks", "audit", func(r prometheus.Registerer) {
			findings.NewMetrics(r)
			for _, s := range sinks {
				if s.Metrics != nil {
					s.Metrics(r)
				}
			}
		}},
	}
	for _, l := range registry() {
		out = append(out, l.metricsSections()...)
	}
	return out
}
