// Package runtime is Portal's runtime source: the API server's audit events
// (its audit webhook backend, or its audit log file) and Falco's alerts,
// evaluated by the rules of mode runtime, feeding the same response
// actions and outputs as admission and audit.
//
// An event is evaluated once per request (internal/context/event decides
// the stage), on the leader, off the sender's path: inputs Offer events to
// a bounded queue and never wait, so the API server is never slowed by
// rule evaluation; a full queue drops and counts. A failing result is an
// event, not a state: it is deduplicated per rule, actor and target for a
// window, handed to the actions as a runtime verdict (acting once, never
// undone), and kept open as a finding for the finding window so alerts
// resolve and PolicyReports show recent runtime findings without growing.
//
// Tenancy is the engine's: a PortalRule sees only events whose object is
// in its namespace, and a cluster-scoped object's events only reach
// PortalClusterRules. A Secret's contents never reach a rule: requestObject
// and responseObject are never decoded, and a Secret target is a stub of
// its name.
package runtime

import (
	"context"
	"log/slog"
	"time"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"k8s.io/utils/clock"
)

// ProducerName is the runtime source's name in the findings pipeline.
const ProducerName = "runtime"

// Defaults of Options.
const (
	DefaultQueueSize       = 10000
	DefaultFalcoQueueSize  = 1000
	DefaultWorkers         = 4
	DefaultCacheSize       = 65536
	DefaultMaxOpenFindings = 10000
	DefaultFindingWindow   = 15 * time.Minute
	DefaultDedupWindow     = time.Minute
	DefaultEvalTimeout     = time.Second
)

// Options configure the source.
type Options struct {
	// Engine evaluates the runtime rules.
	Engine Evaluator
	// Targets resolves an event's resource to its kind and reads the
	// target object from the shared cluster cache (never for Secrets).
	Targets clustercache.Reader
	// Findings holds the runtime producer's open findings; nil keeps none.
	Findings FindingSetter
	// Verdicts receives runtime verdicts for the actions; nil runs none.
	Verdicts core.VerdictSink
	// QueueSize bounds the audit events waiting (the webhook's and the
	// log file's); FalcoQueueSize the Falco alerts waiting, in a queue of
	// their own, so a flood of either input never leaves the other no room.
	// Workers evaluate in parallel, taking from both queues alike.
	QueueSize      int
	FalcoQueueSize int
	Workers        int
	// CacheSize bounds the deduplication keys (past it, the namespace
	// holding the most gives way) and the audit IDs of long-running
	// requests remembered.
	CacheSize int
	// MaxOpenFindings bounds the findings open at once; the oldest close
	// first.
	MaxOpenFindings int
	// FindingWindow is how long a runtime finding stays open: its alert
	// resolves and its report result goes when it ends.
	FindingWindow time.Duration
	// DedupWindow is how long a rule, actor and target raise no second
	// finding (and run no action again).
	DedupWindow time.Duration
	// EvalTimeout bounds one event's evaluation by every runtime rule.
	EvalTimeout time.Duration
	// ExpiryInterval is how often open findings are checked for expiry.
	// Default: a tenth of FindingWindow, at least a second.
	ExpiryInterval time.Duration
	// Clock decides windows and deduplication; default the real clock.
	Clock  clock.PassiveClock
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.FalcoQueueSize <= 0 {
		o.FalcoQueueSize = DefaultFalcoQueueSize
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.MaxOpenFindings <= 0 {
		o.MaxOpenFindings = DefaultMaxOpenFindings
	}
	if o.FindingWindow <= 0 {
		o.FindingWindow = DefaultFindingWindow
	}
	if o.DedupWindow <= 0 {
		o.DedupWindow = DefaultDedupWindow
	}
	if o.EvalTimeout <= 0 {
		o.EvalTimeout = DefaultEvalTimeout
	}
	if o.ExpiryInterval <= 0 {
		o.ExpiryInterval = max(time.Second, o.FindingWindow/10)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Queue queues ev, waiting for room: for inputs nobody waits on (the log
// file), where dropping would lose what waiting does not. done, when not
// nil, is called once ev has been evaluated or deliberately not (its stage
// is not the one its request is evaluated at): never when Portal stops
// first, so the input can tell what to read again after a restart.
func (s *Source) Queue(ctx context.Context, input string, ev event.Event, done func()) error {
	s.m.Received.WithLabelValues(input).Inc()
	if !s.stage(&ev) {
		s.m.Skipped.WithLabelValues(SkipStage).Inc()
		if done != nil {
			done()
		}
		return nil
	}
	select {
	case s.queueOf(input) <- item{ev: ev, input: input, received: s.o.Clock.Now(), done: done}:
		s.m.QueueDepth.WithLabelValues(input).Inc()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Evaluate decides whether ev is the evaluation of its request and, if
// so, evaluates it on the caller's goroutine: `portal eval --events`
// replays a recorded log through it, in order.
func (s *Source) Evaluate(ctx context.Context, input string, ev event.Event) []core.Result {
	s.m.Received.WithLabelValues(input).Inc()
	if !s.stage(&ev) {
		s.m.Skipped.WithLabelValues(SkipStage).Inc()
		return nil
	}
	return s.Process(ctx, input, &ev)
}

// OpenFindings returns the number of runtime findings open now.
func (s *Source) OpenFindings() int { return s.open.Len() }
