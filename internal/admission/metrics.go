package admission

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Decisions are the values of the decision label of
// portal_admission_requests_total.
const (
	DecisionAllowed  = "allowed"
	DecisionDenied   = "denied"
	DecisionWarned   = "warned"
	DecisionBypassed = "bypassed"
	DecisionError    = "error"
	// DecisionThrottled: no evaluation slot before the request's deadline,
	// or its namespace had too many requests waiting for one; see
	// portal_admission_throttled_total.
	DecisionThrottled = "throttled"
)

// Malformed reasons are the values of the reason label of
// portal_admission_malformed_total: why a request was refused without being
// decided. The API server never sends any of these; anything else that can
// reach the webhook port can.
const (
	MalformedMethod          = "method"             // not a POST
	MalformedContentType     = "content_type"       // not application/json
	MalformedTooLarge        = "too_large"          // body over the size limit
	MalformedUnreadable      = "unreadable"         // body could not be read
	MalformedNotJSON         = "not_json"           // body is not a JSON object
	MalformedWrongType       = "wrong_type"         // not an admission.k8s.io/v1 AdmissionReview
	MalformedNoRequest       = "no_request"         // review without request
	MalformedInvalidRequest  = "invalid_request"    // request fields missing or of the wrong type
	MalformedObjectUndecoded = "undecodable_object" // object or oldObject is not a JSON object
	MalformedObjectShape     = "invalid_object"     // object does not have the shape of its kind
)

var malformedReasons = []string{
	MalformedMethod, MalformedContentType, MalformedTooLarge, MalformedUnreadable, MalformedNotJSON,
	MalformedWrongType, MalformedNoRequest, MalformedInvalidRequest, MalformedObjectUndecoded, MalformedObjectShape,
}

// LatencyBuckets are the buckets of portal_admission_latency_seconds. The
// histogram times the decision inside the handler (no TLS, no decoding of the
// AdmissionReview), which normally takes tens of microseconds, so the buckets
// are fine-grained below a millisecond, and around it, where the p99 budget
// of a decision is.
var LatencyBuckets = []float64{
	0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.00075,
	0.001, 0.0015, 0.002, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
}

// Metrics are the admission layer's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Requests         *prometheus.CounterVec
	Latency          prometheus.Histogram
	Bypass           *prometheus.CounterVec
	DryRunViolations *prometheus.CounterVec
	RuleErrors       *prometheus.CounterVec
	Malformed        *prometheus.CounterVec
	// The evaluation slots (Options.MaxConcurrentEvaluations).
	EvaluationSlots prometheus.Gauge
	InFlight        prometheus.Gauge
	Waiting         prometheus.Gauge
	SlotWait        prometheus.Histogram
	Throttled       *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered). Pass controller-runtime's metrics.Registry to serve them on
// the manager's metrics endpoint.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_admission_requests_total",
			Help: "Admission requests answered, by decision (allowed, denied, warned, bypassed, error, throttled).",
		}, []string{"decision"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portal_admission_latency_seconds",
			Help:    "Time Portal's admission handler takes to decide one request, from the decoded request to the response, any wait for an evaluation slot included.",
			Buckets: LatencyBuckets,
		}),
		Bypass: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_admission_bypass_total",
			Help: "Admission requests admitted without evaluation because their namespace is annotated portal.io/bypass=true, by namespace.",
		}, []string{"namespace"}),
		DryRunViolations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_admission_dryrun_violations_total",
			Help: "Violations of dryrun rules at admission (admitted and only recorded), by rule.",
		}, []string{"rule"}),
		RuleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_admission_rule_errors_total",
			Help: "Rule evaluations that failed with an error at admission, by rule and onError (deny: the request was rejected; allow: admitted with a warning).",
		}, []string{"rule", "on_error"}),
		Malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_admission_malformed_total",
			Help: "Requests to the webhook refused as malformed, without a decision and without affecting readiness, by reason.",
		}, []string{"reason"}),
		EvaluationSlots: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_admission_evaluation_slots",
			Help: "Rule evaluations the webhook runs at once at most (--webhook-max-concurrent-evaluations); further requests wait for a slot.",
		}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_admission_evaluations_in_flight",
			Help: "Evaluation slots in use now: admission requests whose rules are being evaluated.",
		}),
		Waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_admission_evaluations_waiting",
			Help: "Admission requests waiting for an evaluation slot now, all namespaces together.",
		}),
		SlotWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portal_admission_slot_wait_seconds",
			Help:    "Time admission requests that had to wait for an evaluation slot waited before they got one.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}),
		Throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_admission_throttled_total",
			Help: "Admission requests answered without evaluation because they got no evaluation slot, by reason (deadline: none became free before the request's deadline; queue_full: its namespace already had the most requests waiting).",
		}, []string{"reason"}),
	}
	for _, d := range []string{DecisionAllowed, DecisionDenied, DecisionWarned, DecisionBypassed, DecisionError, DecisionThrottled} {
		m.Requests.WithLabelValues(d)
	}
	for _, r := range malformedReasons {
		m.Malformed.WithLabelValues(r)
	}
	for _, r := range []string{ThrottledDeadline, ThrottledQueueFull} {
		m.Throttled.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Latency, m.Bypass, m.DryRunViolations, m.RuleErrors, m.Malformed,
			m.EvaluationSlots, m.InFlight, m.Waiting, m.SlotWait, m.Throttled)
	}
	return m
}
