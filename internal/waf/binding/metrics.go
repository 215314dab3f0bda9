package binding

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the binding controller's metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Duration prometheus.Histogram
	Tables   prometheus.Gauge
	Rows     prometheus.Gauge
	Refused  prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portal_waf_binding_reconcile_duration_seconds",
			Help:    "Time to recompute and serve every Gateway's route table (and, on the leader, write the statuses).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		Tables: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_waf_binding_tables",
			Help: "Gateways whose route table the rule set cache serves.",
		}),
		Rows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_waf_binding_table_rows",
			Help: "Route matches in all the route tables the rule set cache serves.",
		}),
		Refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_waf_binding_tables_refused_total",
			Help: "Route tables not served because they exceed the bounds (rows or bytes); the previous table stays.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Duration, m.Tables, m.Rows, m.Refused)
	}
	return m
}

func (m *Metrics) reconciled(d time.Duration, res *Result, refused int) {
	if m == nil {
		return
	}
	m.Duration.Observe(d.Seconds())
	rows := 0
	for _, t := range res.Tables {
		rows += len(t.Rows)
	}
	m.Tables.Set(float64(len(res.Tables) - refused))
	m.Rows.Set(float64(rows))
	m.Refused.Add(float64(refused))
}
