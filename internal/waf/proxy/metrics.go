package proxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/waf/rx"
)

// Metrics are the waf-proxy's Prometheus metrics, documented in
// docs/reference/metrics.md. A nil *Metrics records nothing.
type Metrics struct {
	Requests       *prometheus.CounterVec
	Blocks         *prometheus.CounterVec
	Revision       *prometheus.GaugeVec
	Reloads        prometheus.Counter
	ReloadFailures *prometheus.CounterVec
}

// Reasons of a failed reload, the values of the reason label of
// portal_waf_proxy_reload_failures_total.
const (
	FailureFetch   = "fetch"
	FailureCompile = "compile"
	// FailureDigest: the entry did not have the sha256 /latest announced
	// (tampered with, or corrupted, on the way).
	FailureDigest = "digest"
)

// codeDropped is the code label of a request whose connection the WAF
// dropped (the drop action) without an answer.
const codeDropped = "dropped"

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_proxy_requests_total",
			Help: "Requests the waf-proxy answered, by HTTP status code sent to the client (dropped: connection closed by the drop action).",
		}, []string{"code"}),
		Blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_proxy_blocks_total",
			Help: "Requests the WAF interrupted (deny, drop or redirect), by the id of the rule that interrupted them.",
		}, []string{"rule_id"}),
		Revision: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_waf_proxy_ruleset_revision",
			Help: "The rule set revision the waf-proxy enforces: one series, labelled with the revision uuid, whose value is the revision's timestamp in Unix seconds. Absent before the first load.",
		}, []string{"uuid"}),
		Reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_waf_proxy_reloads_total",
			Help: "Rule set revisions compiled and swapped in.",
		}),
		ReloadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_waf_proxy_reload_failures_total",
			Help: "Failed attempts to load a new rule set revision, by reason (fetch, digest or compile); the last good revision stays enforced.",
		}, []string{"reason"}),
	}
	for _, r := range []string{FailureFetch, FailureCompile, FailureDigest} {
		m.ReloadFailures.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Blocks, m.Revision, m.Reloads, m.ReloadFailures,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "portal_waf_re2_dfa_fallbacks_total",
				Help: "@rx searches whose RE2 DFA cache filled and that went on in RE2's NFA (same answer, slower); RE2's own log lines about them are rate-limited to one a minute.",
			}, func() float64 { return float64(rx.DFAFallbacks()) }))
	}
	return m
}

func (m *Metrics) request(code string) {
	if m != nil {
		m.Requests.WithLabelValues(code).Inc()
	}
}

func (m *Metrics) block(ruleID int) {
	if m != nil {
		m.Blocks.WithLabelValues(strconv.Itoa(ruleID)).Inc()
	}
}

func (m *Metrics) loaded(uuid string, ts time.Time) {
	if m == nil {
		return
	}
	m.Reloads.Inc()
	m.Revision.Reset()
	m.Revision.WithLabelValues(uuid).Set(float64(ts.UnixNano()) / 1e9)
}

func (m *Metrics) unloaded() {
	if m != nil {
		m.Revision.Reset()
	}
}

func (m *Metrics) failed(reason string) {
	if m != nil {
		m.ReloadFailures.WithLabelValues(reason).Inc()
	}
}
