package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/waf/ruleset"
)

// Metrics are the RuleSet compiler's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Compiles *prometheus.CounterVec
	Duration prometheus.Histogram
	// InFlight counts compiles holding a slot, those past their deadline
	// included.
	InFlight prometheus.Gauge
	// LastGoodBytes and LastGoodWAFs measure the last good WAFs kept open.
	LastGoodBytes prometheus.Gauge
	LastGoodWAFs  prometheus.Gauge
	// TransformationChains reads Coraza's process-wide registry of
	// transformation chains, which only grows (ruleset/chains.go).
	TransformationChains prometheus.GaugeFunc
}

// Results of a RuleSet reconcile, the values of the result label.
const (
	ResultCached      = "cached"
	ResultUnchanged   = "unchanged"
	ResultInvalid     = "invalid"
	ResultSandbox     = "sandbox"
	ResultMissingRefs = "missing"
	ResultDuplicate   = "duplicate"
	ResultTooLarge    = "too_large"
	ResultTimeout     = "timeout"
)

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Compiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_ruleset_compiles_total",
			Help: "RuleSet reconciles by result: cached (a new revision), unchanged, invalid, sandbox (rejected by the sandbox), missing (a RuleSource or RuleData is missing), duplicate (one named twice), too_large (over --waf-max-ruleset-bytes, --waf-max-data-file-bytes or the transformation limits) or timeout (over --waf-compile-timeout).",
		}, []string{"result"}),
		Duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portal_waf_ruleset_compile_duration_seconds",
			Help:    "Time to check and compile a RuleSet with Coraza.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_waf_ruleset_compiles_in_flight",
			Help: "RuleSet compiles holding a compile slot (--waf-compile-concurrency), including compiles past their deadline that have not stopped yet.",
		}),
		LastGoodBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_waf_ruleset_last_good_bytes",
			Help: "Weight of the last good WAFs the compiler keeps open: bytes of SecLang Coraza parsed for them (included Core Rule Set files too) plus their data files; bounded by --waf-max-last-good-bytes.",
		}),
		LastGoodWAFs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_waf_ruleset_last_good_wafs",
			Help: "Last good WAFs the compiler keeps open.",
		}),
		TransformationChains: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "portal_waf_transformation_chains",
			Help: "Distinct transformation chains Coraza has registered in this process, for every compile since it started, failed ones too; Coraza never forgets one.",
		}, func() float64 { return float64(ruleset.TransformationChains()) }),
	}
	for _, r := range []string{ResultCached, ResultUnchanged, ResultInvalid, ResultSandbox, ResultMissingRefs, ResultDuplicate, ResultTooLarge, ResultTimeout} {
		m.Compiles.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Compiles, m.Duration, m.InFlight, m.LastGoodBytes, m.LastGoodWAFs, m.TransformationChains)
	}
	return m
}
