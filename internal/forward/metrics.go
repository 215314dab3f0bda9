package forward

import "github.com/prometheus/client_golang/prometheus"

// Results of a forwarded verdict on the sender (the result label of
// portal_verdicts_forwarded_total).
const (
	// SentAccepted: the leader took the verdict (or already had it).
	SentAccepted = "accepted"
	// SentRefused: the leader refused the request for good (401, 403,
	// 400, 413): retrying would not change its answer.
	SentRefused = "refused"
	// SentFailed: no leader took it within the attempts.
	SentFailed = "failed"
	// SentHandedOver: this replica took the lease while the verdict
	// waited, and its own actions took it.
	SentHandedOver = "handed_over"
)

// Reasons a sender drops a verdict before an attempt (the reason label of
// portal_verdicts_forward_dropped_total).
const DropQueueFull = "queue_full"

// What the leader did with a forwarded verdict (the result label of
// portal_verdicts_forward_received_total).
const (
	ReceivedAccepted = "accepted"
	// ReceivedDuplicate: its ID was accepted before; not acted on again.
	ReceivedDuplicate = "duplicate"
	// ReceivedUnknownRule: the leader holds no rule of that name with an
	// action in the verdict's mode (the rule changed meanwhile, or the
	// sender's rules differ).
	ReceivedUnknownRule = "unknown_rule"
	// ReceivedOutOfNamespace: a PortalRule's verdict about an object of
	// another namespace, which it may never act on.
	ReceivedOutOfNamespace = "out_of_namespace"
	// ReceivedDropped: the actions' verdict queue was full (counted again
	// by portal_actions_dropped_total).
	ReceivedDropped = "dropped"
)

// Reasons the leader refuses a whole request (the reason label of
// portal_verdicts_forward_refused_total).
const (
	RefusedUnauthenticated = "unauthenticated"
	RefusedForbidden       = "forbidden"
	RefusedRateLimited     = "rate_limited"
	RefusedNotLeader       = "not_leader"
	RefusedInvalid         = "invalid"
	RefusedReviewFailed    = "review_failed"
)

// Metrics are the forwarding's metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Forwarded *prometheus.CounterVec
	Dropped   *prometheus.CounterVec
	Queued    prometheus.Gauge
	Received  *prometheus.CounterVec
	Refused   *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_verdicts_forwarded_total",
			Help: "Verdicts a replica that does not lead forwarded to the leader, by result (accepted, refused: the leader refused the request for good, failed: no leader took it within the attempts, handed_over: this replica took the lease meanwhile and acted on it itself).",
		}, []string{"result"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_verdicts_forward_dropped_total",
			Help: "Verdicts a replica that does not lead dropped before forwarding them, by reason (queue_full: the forward queue was full; admission was not made to wait).",
		}, []string{"reason"}),
		Queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_verdicts_forward_queued",
			Help: "Verdicts waiting to be forwarded to the leader.",
		}),
		Received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_verdicts_forward_received_total",
			Help: "Forwarded verdicts the leader read from authenticated requests, by result (accepted, duplicate: its ID was taken before, unknown_rule, out_of_namespace, dropped: the actions' queue was full).",
		}, []string{"result"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_verdicts_forward_refused_total",
			Help: "Requests to the forwarding endpoint refused whole, by reason (unauthenticated, forbidden: another identity than Portal's, rate_limited, not_leader, invalid, review_failed: the TokenReview could not be made).",
		}, []string{"reason"}),
	}
	for _, r := range []string{SentAccepted, SentRefused, SentFailed, SentHandedOver} {
		m.Forwarded.WithLabelValues(r)
	}
	m.Dropped.WithLabelValues(DropQueueFull)
	for _, r := range []string{ReceivedAccepted, ReceivedDuplicate, ReceivedUnknownRule, ReceivedOutOfNamespace, ReceivedDropped} {
		m.Received.WithLabelValues(r)
	}
	for _, r := range []string{RefusedUnauthenticated, RefusedForbidden, RefusedRateLimited, RefusedNotLeader, RefusedInvalid, RefusedReviewFailed} {
		m.Refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.Forwarded, m.Dropped, m.Queued, m.Received, m.Refused)
	}
	return m
}
