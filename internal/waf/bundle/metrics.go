package bundle

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the bundle layer's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	// Requests counts S3 requests by operation (get, put) and outcome (ok,
	// unchanged: a conditional get answered 304, transient_error: retried
	// unless attempts ran out, permanent_error).
	Requests *prometheus.CounterVec
	// Gets counts Fetcher.Get calls by state (fresh, stale, missing).
	Gets *prometheus.CounterVec
	// Errors counts failed bundle fetches by reason.
	Errors *prometheus.CounterVec
	// FetchDuration is the time to download and verify one bundle.
	FetchDuration prometheus.Histogram
	// ClientReloads counts S3 clients built after a Secret changed.
	ClientReloads *prometheus.CounterVec
	// StoredBytes is the size of the last good bundles on disk.
	StoredBytes prometheus.Gauge
	// StoreErrors counts last good bundles that could not be persisted.
	StoreErrors prometheus.Counter
	// Publishes counts RuleSet bundle uploads by result.
	Publishes *prometheus.CounterVec
	// Fetches are the bundle fetches of WAFGatewayBindingPolicies by state:
	// running (holding a fetch slot) or waiting for one.
	Fetches *prometheus.GaugeVec
}

// Outcomes of an S3 request.
const (
	OutcomeOK        = "ok"
	OutcomeUnchanged = "unchanged"
	OutcomeTransient = "transient_error"
	OutcomePermanent = "permanent_error"
)

// States of portal_waf_bundle_fetches.
const (
	FetchRunning = "running"
	FetchWaiting = "waiting"
)

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_bundle_requests_total",
			Help: "S3 requests to bundle storage by op (get, put) and outcome: ok, unchanged (a conditional get answered 304: the object last downloaded from that location, not the pinned one, is still there), transient_error (network, 5xx, 408, 429: retried with backoff while attempts remain) or permanent_error (other 4xx, TLS verification: not retried).",
		}, []string{"op", "outcome"}),
		Gets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_bundle_gets_total",
			Help: "Bundle lookups by state: fresh (the requested bundle), stale (it could not be had, the last good one is kept) or missing (cold miss: nothing to enforce).",
		}, []string{"state"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_bundle_fetch_errors_total",
			Help: "Bundle fetches that failed, by reason: FetchError, IntegrityError, BundleTooLarge, InvalidBundle or LocationNotAllowed.",
		}, []string{"reason"}),
		FetchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portal_waf_bundle_fetch_duration_seconds",
			Help:    "Time to download a bundle from storage and verify its sha256, retries included.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}),
		ClientReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_bundle_client_reloads_total",
			Help: "S3 clients built from the bundle storage Secrets (credentials, CA, client certificate) by result (ok, error); a changed Secret builds a new one.",
		}, []string{"result"}),
		StoredBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_waf_bundle_stored_bytes",
			Help: "Bytes of last good bundles persisted under --bundle-cache-dir; bounded by --bundle-cache-max-bytes.",
		}),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_waf_bundle_store_errors_total",
			Help: "Last good bundles that could not be persisted (disk full, over --bundle-cache-max-bytes): they are enforced but would not survive a restart.",
		}),
		Publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_bundle_publishes_total",
			Help: "RuleSet bundles uploaded to storage by result (ok, error).",
		}, []string{"result"}),
		Fetches: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_waf_bundle_fetches",
			Help: "Bundle fetches of WAFGatewayBindingPolicies by state: running (holding one of the --bundle-fetch-concurrency slots) or waiting for a slot.",
		}, []string{"state"}),
	}
	for _, op := range []string{"get", "put"} {
		for _, o := range []string{OutcomeOK, OutcomeUnchanged, OutcomeTransient, OutcomePermanent} {
			m.Requests.WithLabelValues(op, o)
		}
	}
	for _, s := range []State{StateFresh, StateStale, StateMissing} {
		m.Gets.WithLabelValues(stateLabel(s))
	}
	for _, r := range []string{ReasonFetchError, ReasonIntegrityError, ReasonBundleTooLarge, ReasonInvalidBundle, ReasonLocationNotAllowed} {
		m.Errors.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.ClientReloads.WithLabelValues(r)
		m.Publishes.WithLabelValues(r)
	}
	for _, s := range []string{FetchRunning, FetchWaiting} {
		m.Fetches.WithLabelValues(s)
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Gets, m.Errors, m.FetchDuration, m.ClientReloads, m.StoredBytes, m.StoreErrors, m.Publishes, m.Fetches)
	}
	return m
}

func stateLabel(s State) string {
	switch s {
	case StateFresh:
		return "fresh"
	case StateStale:
		return "stale"
	default:
		return "missing"
	}
}
