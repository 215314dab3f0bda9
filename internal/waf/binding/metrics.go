package binding

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// Metrics are the binding controller's metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Duration prometheus.Histogram
	Tables   prometheus.Gauge
	Rows     prometheus.Gauge
	Refused  prometheus.Counter
	LeftOut  *prometheus.GaugeVec
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
		LeftOut: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_waf_binding_routes_left_out",
			Help: "Routes left out of a Gateway's route table (counted once per Gateway), by reason: TableLimitExceeded (the table cannot hold them beside older routes) or UnsupportedMatch.",
		}, []string{"reason"}),
	}
	for _, r := range []string{wafv1alpha1.ReasonTableLimitExceeded, wafv1alpha1.ReasonUnsupportedMatch} {
		m.LeftOut.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Duration, m.Tables, m.Rows, m.Refused, m.LeftOut)
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
	left := map[string]int{wafv1alpha1.ReasonTableLimitExceeded: 0, wafv1alpha1.ReasonUnsupportedMatch: 0}
	for _, gws := range res.LeftOut {
		for _, why := range gws {
			left[why.Reason]++
		}
	}
	for reason, n := range left {
		m.LeftOut.WithLabelValues(reason).Set(float64(n))
	}
}
