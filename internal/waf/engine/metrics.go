package engine

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the Engine controller's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	// Reconciles counts Engine reconciles by result (Result* constants).
	Reconciles *prometheus.CounterVec
	// TokenRequests counts the cache tokens minted for WasmPlugins.
	TokenRequests *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_engine_reconciles_total",
			Help: "Engine reconciles by result: provisioned, not_accepted (TargetNotFound or TargetConflict), ruleset_not_found, ruleset_not_ready, unsupported_rules, target_service_not_found, image_not_allowed or failed.",
		}, []string{"result"}),
		TokenRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_engine_token_requests_total",
			Help: "Cache tokens requested (TokenRequest) for istio-wasm Engines, by result: ok or error.",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Reconciles, m.TokenRequests)
	}
	return m
}
