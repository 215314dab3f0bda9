package certs

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics are the certificate controller's Prometheus metrics, documented in
// docs/reference/metrics.md and docs/operator/certificate-management.md.
type Metrics struct {
	// Expiry is the notAfter of the serving certificate this replica serves.
	Expiry prometheus.Gauge
	// Renewals counts Secret writes that issued a certificate or changed the
	// CA bundle; only the leader writes, except a missing Secret's creation.
	Renewals prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_cert_expiry_timestamp_seconds",
			Help: "Expiry (notAfter, Unix seconds) of the webhook serving certificate this replica serves.",
		}),
		Renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_cert_renewals_total",
			Help: "Webhook certificate Secret writes that issued a certificate or changed the CA bundle.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Expiry, m.Renewals)
	}
	return m
}

var (
	defaultMetricsOnce sync.Once
	defaultMetrics     *Metrics
)

// DefaultMetrics are registered once with controller-runtime's registry, which
// the manager's metrics endpoint serves; Options.Metrics defaults to them.
func DefaultMetrics() *Metrics {
	defaultMetricsOnce.Do(func() { defaultMetrics = NewMetrics(metrics.Registry) })
	return defaultMetrics
}

// NewNamedMetrics is NewMetrics for a certificate other than the webhook's:
// the metrics are named prefix+"_expiry_timestamp_seconds" and
// prefix+"_renewals_total" and their help names what, e.g.
// NewNamedMetrics(reg, "portal_waf_cache_cert", "rule set cache").
func NewNamedMetrics(reg prometheus.Registerer, prefix, what string) *Metrics {
	m := &Metrics{
		Expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: prefix + "_expiry_timestamp_seconds",
			Help: "Expiry (notAfter, Unix seconds) of the " + what + " serving certificate this replica serves.",
		}),
		Renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: prefix + "_renewals_total",
			Help: "Writes of the " + what + " certificate Secret that issued a certificate or changed the CA bundle.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Expiry, m.Renewals)
	}
	return m
}
