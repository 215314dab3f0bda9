package exception

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/core"
)

// Metrics are the exceptions' Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Applied         *prometheus.CounterVec
	Expired         prometheus.Counter
	ConditionErrors *prometheus.CounterVec
	Loaded          *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, for tests and offline tools).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_exceptions_applied_total",
			Help: "Rule evaluations an exception skipped (or whose actions it kept off), by exception (namespace/name for a PortalException) and rule.",
		}, []string{"exception", "rule"}),
		Expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_exceptions_expired_total",
			Help: "Exceptions that reached their expires time while loaded.",
		}),
		ConditionErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_exception_condition_errors_total",
			Help: "Evaluations of an exception's condition that failed (the exception then did not apply), by exception.",
		}, []string{"exception"}),
		Loaded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_exceptions",
			Help: "Exception objects Portal knows, by state (active, expired, refused).",
		}, []string{"state"}),
	}
	if reg != nil {
		reg.MustRegister(m.Applied, m.Expired, m.ConditionErrors, m.Loaded)
	}
	return m
}

// ExceptionApplied implements engine.ExceptionReporter.
func (m *Metrics) ExceptionApplied(x *core.Exception, r *core.Rule) {
	m.Applied.WithLabelValues(x.Ref(), r.MetricLabel()).Inc()
}

// ConditionFailed implements engine.ExceptionReporter.
func (m *Metrics) ConditionFailed(x *core.Exception, _ core.ResourceRef, _ error) {
	m.ConditionErrors.WithLabelValues(x.Ref()).Inc()
}

// forget drops the series of an exception that is gone, so a tenant
// creating and deleting exceptions cannot grow them without bound.
func (m *Metrics) forget(ref string) {
	m.Applied.DeletePartialMatch(prometheus.Labels{"exception": ref})
	m.ConditionErrors.DeleteLabelValues(ref)
}
