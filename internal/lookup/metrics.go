package lookup

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the lookup layer's Prometheus metrics.
type Metrics struct {
	CycleSuppressed prometheus.Counter
	CycleDropped    prometheus.Counter
	// CyclePending reports the pairs waiting for a trailing
	// re-evaluation, read from the watcher that set it.
	CyclePending prometheus.GaugeFunc
	Requeues     prometheus.Counter

	pending atomic.Pointer[func() int]
}

// setPending makes CyclePending read fn.
func (m *Metrics) setPending(fn func() int) { m.pending.Store(&fn) }

// NewMetrics registers the metrics with reg (none when nil); index, when
// set, is reported as portal_lookup_dependencies and
// portal_lookup_dependency_evictions_total.
func NewMetrics(reg prometheus.Registerer, index *DepIndex) *Metrics {
	m := &Metrics{
		CycleSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_lookup_cycle_suppressed_total",
			Help: "Re-evaluations of a rule on an object, triggered by a change to an object the rule read, that cycle protection suppressed (more than the limit per window); each pair's are coalesced into one trailing re-evaluation when its window allows.",
		}),
		CycleDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_lookup_cycle_dropped_total",
			Help: "Suppressed re-evaluations left to the periodic resync because the pending trailing re-evaluations reached their bound (--lookup-max-dependencies).",
		}),
		Requeues: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_lookup_requeues_total",
			Help: "Objects queued for re-evaluation because an object their rules read was added, changed or deleted.",
		}),
	}
	m.CyclePending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "portal_lookup_cycle_pending",
		Help: "Rule/object pairs past the cycle limit waiting for their trailing re-evaluation.",
	}, func() float64 {
		if fn := m.pending.Load(); fn != nil {
			return float64((*fn)())
		}
		return 0
	})
	if reg == nil {
		return m
	}
	reg.MustRegister(m.CycleSuppressed, m.CycleDropped, m.CyclePending, m.Requeues)
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
