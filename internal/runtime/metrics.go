package runtime

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Inputs: the input label of the metrics.
const (
	InputWebhook = "webhook"
	InputFile    = "file"
	InputFalco   = "falco"
)

// Reasons an event is dropped (the reason label of
// portal_runtime_events_dropped_total).
const (
	DropQueueFull = "queue_full"
	DropDecode    = "decode"
)

// Reasons an event is not evaluated (portal_runtime_events_skipped_total).
const (
	SkipStage    = "stage"
	SkipNoObject = "no_object"
	SkipResource = "unknown_resource"
)

// Metrics are the runtime layer's Prometheus metrics, documented in
// docs/reference/metrics.md.
type Metrics struct {
	Received     *prometheus.CounterVec
	Dropped      *prometheus.CounterVec
	Skipped      *prometheus.CounterVec
	Evaluated    prometheus.Counter
	Findings     prometheus.Counter
	Deduplicated prometheus.Counter
	Expired      *prometheus.CounterVec
	QueueDepth   *prometheus.GaugeVec
	Requests     *prometheus.CounterVec
	Refused      *prometheus.CounterVec
	Latency      prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_runtime_events_received_total",
			Help: "Runtime events received, by input (webhook: the API server's audit webhook; file: the audit log file; falco: Falco alerts).",
		}, []string{"input"}),
		Dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_runtime_events_dropped_total",
			Help: "Runtime events dropped before evaluation, by input and reason (queue_full: the evaluation queue was full, the sender was not made to wait; decode: not an audit event or Falco alert, or an audit log line over 1 MiB).",
		}, []string{"input", "reason"}),
		Skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_runtime_events_skipped_total",
			Help: "Runtime events taken off the queue and not evaluated, by reason (stage: not the stage its request is evaluated at; no_object: no object named; unknown_resource: a resource the API server does not serve).",
		}, []string{"reason"}),
		Evaluated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_runtime_events_evaluated_total",
			Help: "Runtime events evaluated by the runtime rules.",
		}),
		Findings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_runtime_findings_total",
			Help: "Runtime findings raised: a rule failed on an event and no finding of the same rule, actor and target was raised within the deduplication window.",
		}),
		Deduplicated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_runtime_findings_deduplicated_total",
			Help: "Failing runtime results not raised again because the same rule, actor and target raised one within --runtime-dedup-window.",
		}),
		Expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_runtime_findings_expired_total",
			Help: "Runtime findings closed, by reason (window: --runtime-finding-window passed; capacity: --runtime-max-open-findings were open and this was the oldest).",
		}, []string{"reason"}),
		QueueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portal_runtime_queue_depth",
			Help: "Runtime events waiting for evaluation, by input (webhook, file, falco): which source fills the queue.",
		}, []string{"input"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_runtime_requests_total",
			Help: "HTTP requests to the runtime endpoint, by input and status code.",
		}, []string{"input", "code"}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_runtime_clients_refused_total",
			Help: "Requests to the runtime endpoint refused before their body was read, by input and reason (no_credentials: neither a client certificate the client CA signed nor the path's token, 401; identity: a certificate the client CA signed for a name the path does not allow, 403).",
		}, []string{"input", "reason"}),
		Latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portal_runtime_event_to_evaluation_seconds",
			Help:    "Time from the event's stage timestamp (the API server's, or Falco's alert time) to its evaluation by the runtime rules.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}),
	}
	for _, in := range []string{InputWebhook, InputFile, InputFalco} {
		m.Received.WithLabelValues(in)
		m.Dropped.WithLabelValues(in, DropQueueFull)
		m.QueueDepth.WithLabelValues(in)
	}
	for _, in := range []string{InputWebhook, InputFalco} {
		m.Refused.WithLabelValues(in, RefuseCredentials)
		m.Refused.WithLabelValues(in, RefuseIdentity)
	}
	if reg != nil {
		reg.MustRegister(m.Received, m.Dropped, m.Skipped, m.Evaluated, m.Findings, m.Deduplicated, m.Expired, m.QueueDepth, m.Requests, m.Refused, m.Latency)
	}
	return m
}
