package lookup

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the lookup layer's Prometheus metrics.
type Metrics struct {
	CycleSuppressed prometheus.Counter
	Requeues        prometheus.Counter
}

// NewMetrics registers the metrics with reg (none when nil); index, when
// set, is reported as portal_lookup_dependencies and
// portal_lookup_dependency_evictions_total.
func NewMetrics(reg prometheus.Registerer, index *DepIndex) *Metrics {
	m := &Metrics{
		CycleSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_lookup_cycle_suppressed_total",
			Help: "Re-evaluations of a rule on an object, triggered by a change to an object the rule read, that cycle protection suppressed (more than the limit per window).",
		}),
		Requeues: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_lookup_requeues_total",
			Help: "Objects queued for re-evaluation because an object their rules read was added, changed or deleted.",
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.CycleSuppressed, m.Requeues)
	if index != nil {
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "portal_lookup_dependencies",
				Help: "Entries in the lookup dependency index: (rule, object) evaluations and what each read.",
			}, func() float64 { return float64(index.Len()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "portal_lookup_dependency_evictions_total",
				Help: "Dependency index entries dropped because the index reached its bound (--lookup-max-dependencies); the periodic resync covers what they tracked.",
			}, func() float64 { return float64(index.Evicted()) }),
		)
	}
	return m
}
