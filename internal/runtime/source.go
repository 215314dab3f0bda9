package runtime

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// Evaluator runs the rules; *engine.Engine is one.
type Evaluator interface {
	Evaluate(ctx context.Context, obj *unstructured.Unstructured, opts engine.Options) ([]core.Result, error)
}

// FindingSetter holds the runtime producer's findings; *findings.Producer
// is one.
type FindingSetter interface {
	Set(ref core.ResourceRef, findings []core.Finding, observed time.Time) bool
}

// item is one event waiting for evaluation.
type item struct {
	ev       event.Event
	input    string
	received time.Time
	// done, when set, is called once ev is evaluated (see Queue).
	done func()
}

// Source evaluates runtime events: inputs Offer them, never waiting; a
// bounded queue holds them for the workers, which evaluate each once,
// deduplicate per rule, actor and target, open an expiring finding and hand
// the rule's actions a runtime verdict.
type Source struct {
	o   Options
	m   *Metrics
	log *slog.Logger
	// audit and falco are the bounded queues of the two kinds of input.
	audit chan item
	falco chan item
	open  *openFindings
	// started remembers the audit IDs of long-running requests whose
	// ResponseStarted stage was offered, until their ResponseComplete, so
	// that is not evaluated again.
	started *nsLRU
	// dedup holds the last time each rule, actor and target raised a
	// finding.
	dedup *nsLRU
	// resolved caches what the RESTMapper said of each resource events
	// name: asking it per event costs more than evaluating the rules. A
	// resource it did not know is remembered as the time until which it
	// is not asked again.
	resolved *lru.Cache
	// unknownAsks bounds how often the RESTMapper is asked about a
	// resource not in resolved: a miss makes it read the API server's
	// discovery again, and any API user can send audited requests for
	// resources that do not exist, each name new.
	unknownAsks *rate.Limiter
}

// Bounds of asking the RESTMapper about resources events name.
const (
	unknownResourceTTL = 30 * time.Second
	unknownAsksPerSec  = 10
	unknownAsksBurst   = 100
	errResolveDeferred = resolveError("too many resources to look up: the event is skipped")
	errResourceUnknown = resolveError("resource not served (remembered for a while)")
)

type resolveError string

func (e resolveError) Error() string { return string(e) }

// NewSource returns a source; Start runs its workers.
func NewSource(o Options, m *Metrics) *Source {
	o.defaults()
	return &Source{
		o: o, m: m, log: o.Logger,
		audit:       make(chan item, o.QueueSize),
		falco:       make(chan item, o.FalcoQueueSize),
		open:        newOpenFindings(o.Findings, o.FindingWindow, o.MaxOpenFindings, m),
		started:     newNSLRU(o.CacheSize),
		dedup:       newNSLRU(o.CacheSize),
		resolved:    lru.New(4096),
		unknownAsks: rate.NewLimiter(unknownAsksPerSec, unknownAsksBurst),
	}
}

// Offer queues ev for evaluation without ever blocking: an event that
// finds the queue full is dropped and counted. It reports whether ev was
// queued or deliberately not evaluated (a stage its request is not
// evaluated at).
func (s *Source) Offer(input string, ev event.Event) bool {
	s.m.Received.WithLabelValues(input).Inc()
	if !s.stage(&ev) {
		s.m.Skipped.WithLabelValues(SkipStage).Inc()
		return true
	}
	select {
	case s.queueOf(input) <- item{ev: ev, input: input, received: s.o.Clock.Now()}:
		s.m.QueueDepth.WithLabelValues(input).Inc()
		return true
	default:
		s.m.Dropped.WithLabelValues(input, DropQueueFull).Inc()
		return false
	}
}

// queueOf is the queue of input's events.
func (s *Source) queueOf(input string) chan item {
	if input == InputFalco {
		return s.falco
	}
	return s.audit
}

// stage decides, in the order events arrive, whether ev is the one
// evaluation of its request.
func (s *Source) stage(ev *event.Event) bool {
	if ev.Falco != nil || ev.AuditID == "" || !event.LongRunning(ev) {
		return event.StageDecision(ev, false)
	}
	ns := ""
	if ev.ObjectRef != nil {
		ns = ev.ObjectRef.Namespace
	}
	var seen bool
	switch ev.Stage {
	case event.StageResponseComplete, event.StagePanic:
		// The request's last stage: its ID is not needed any more.
		seen = s.started.remove(ns, ev.AuditID)
	default:
		s.started.update(ns, ev.AuditID, func(_ any, ok bool) (any, bool) {
			seen = ok
			return struct{}{}, ev.Stage == event.StageResponseStarted
		})
	}
	return event.StageDecision(ev, seen)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: runtime
// events are evaluated on the leader, where the actions run.
func (*Source) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: the workers and the expiry of open
// findings, until ctx ends.
func (s *Source) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range s.o.Workers {
		wg.Go(func() { s.work(ctx) })
	}
	wg.Go(func() {
		t := time.NewTicker(s.o.ExpiryInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.open.expire(s.o.Clock.Now())
			}
		}
	})
	wg.Wait()
	return nil
}

// Expire closes the findings whose window has passed at now.
func (s *Source) Expire(now time.Time) { s.open.expire(now) }

func (s *Source) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-s.audit:
			s.take(ctx, &it)
		case it := <-s.falco:
			// Chosen at random among ready queues: a flood of one input
			// takes at most its share of the workers.
			s.take(ctx, &it)
		}
	}
}

// take evaluates a queued item and says so to its input, unless Portal is
// stopping and the evaluation was cut short: that event is read again.
func (s *Source) take(ctx context.Context, it *item) {
	s.m.QueueDepth.WithLabelValues(it.input).Dec()
	if _, complete := s.process(ctx, it.input, &it.ev); complete && it.done != nil {
		it.done()
	}
}

// Process evaluates one event now, on the caller's goroutine: the workers
// call it, and so do `portal eval --events` and the benchmarks. It returns
// the failing results raised as findings.
func (s *Source) Process(ctx context.Context, input string, ev *event.Event) []core.Result {
	raised, _ := s.process(ctx, input, ev)
	return raised
}

// process is Process, also reporting whether the event was dealt with:
// false when ctx ended before its rules were done, so they may not all
// have run.
func (s *Source) process(ctx context.Context, input string, ev *event.Event) (raised []core.Result, complete bool) {
	ref := ev.ObjectRef
	if ref == nil || ref.Resource == "" {
		s.m.Skipped.WithLabelValues(SkipNoObject).Inc()
		return nil, true
	}
	name := ref.Resource
	if ref.APIGroup != "" {
		name += "." + ref.APIGroup
	}
	res, err := s.resolve(name, s.o.Clock.Now())
	if err != nil {
		s.m.Skipped.WithLabelValues(SkipResource).Inc()
		return nil, true
	}
	obj, target := s.target(res, ref)
	classes := event.Classify(ev)
	ectx, cancel := context.WithTimeout(ctx, s.o.EvalTimeout)
	defer cancel()
	env := event.Env(ev, classes, target)
	results, err := s.o.Engine.Evaluate(ectx, obj, engine.Options{
		Mode: core.ModeRuntime, Event: env, RuntimeEvents: classes,
		NamespacedEvent: func() map[string]any { return event.NamespacedEnv(env) },
	})
	complete = ctx.Err() == nil
	if err != nil {
		s.log.Warn("runtime event not evaluated", "input", input, "auditID", ev.AuditID, "error", err)
		return nil, complete
	}
	s.m.Evaluated.Inc()
	if !ev.StageTimestamp.IsZero() {
		s.m.Latency.Observe(s.o.Clock.Now().Sub(ev.StageTimestamp).Seconds())
	}
	now := s.o.Clock.Now()
	for i := range results {
		r := &results[i]
		if r.Outcome == core.OutcomeError {
			s.log.Warn("runtime rule failed", "rule", r.Rule.MetricLabel(), "auditID", ev.AuditID, "error", r.Message)
			continue
		}
		if r.Outcome != core.OutcomeFail || !s.first(r, ev, now) {
			continue
		}
		if r.Resource.Name == "" {
			// A list or watch of every object of the namespace.
			r.Resource.Name = "*"
		}
		s.m.Findings.Inc()
		s.open.add(*r, now)
		s.offer(r, ev, now)
		raised = append(raised, *r)
	}
	return raised, complete
}

// resolve maps a resource as events name it to its kind, remembering the
// answer. A resource the mapper does not know is remembered for
// unknownResourceTTL (a CRD may be installed meanwhile), and new names are
// asked at a bounded rate: the API server audits requests for resources it
// does not serve too.
func (s *Source) resolve(name string, now time.Time) (clustercache.Resource, error) {
	if v, ok := s.resolved.Get(name); ok {
		switch v := v.(type) {
		case clustercache.Resource:
			return v, nil
		case time.Time:
			if now.Before(v) {
				return clustercache.Resource{}, errResourceUnknown
			}
		}
	}
	if !s.unknownAsks.AllowN(now, 1) {
		return clustercache.Resource{}, errResolveDeferred
	}
	res, err := s.o.Targets.Resolve(name)
	if err != nil {
		s.resolved.Add(name, now.Add(unknownResourceTTL))
		return res, err
	}
	s.resolved.Add(name, res)
	return res, nil
}

// target is the object a rule sees as object.* and event.target: the live
// object from the cluster cache where it holds one, else a stub of the
// event's reference. A Secret is always a stub: what it holds never reaches
// a rule.
func (s *Source) target(res clustercache.Resource, ref *event.ObjectRef) (*unstructured.Unstructured, map[string]any) {
	ns := ref.Namespace
	if !res.Namespaced {
		ns = ""
	}
	if res.GVR.Group == "" && res.GVR.Resource == "secrets" || ref.Name == "" {
		return stub(res, ns, ref), nil
	}
	live, ok, err := s.o.Targets.Get(res.GVR, ns, ref.Name)
	if err != nil || !ok {
		return stub(res, ns, ref), nil
	}
	return live, live.Object
}

func stub(res clustercache.Resource, ns string, ref *event.ObjectRef) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(res.GVK)
	u.SetNamespace(ns)
	u.SetName(ref.Name)
	u.SetUID(types.UID(ref.UID))
	return u
}

// first reports whether r is the first failing result of its rule, actor
// and target within the deduplication window, and records it.
func (s *Source) first(r *core.Result, ev *event.Event, now time.Time) bool {
	src := r.Rule.Source
	k := strings.Join([]string{src.Kind, src.Namespace, src.Name, r.Rule.Name, actor(ev),
		r.Resource.APIVersion, r.Resource.Kind, r.Resource.Namespace, r.Resource.Name}, "\x00")
	first := true
	s.dedup.update(r.Resource.Namespace, k, func(last any, ok bool) (any, bool) {
		first = !ok || now.Sub(last.(time.Time)) >= s.o.DedupWindow
		return now, first
	})
	if !first {
		s.m.Deduplicated.Inc()
	}
	return first
}

// actor names who caused the event: the requesting user, or for an alert
// the Falco rule that detected it (there is no acting credential), so two
// detections on one pod are two findings.
func actor(ev *event.Event) string {
	if ev.Falco != nil {
		return "falco\x00" + ev.Falco.Rule
	}
	return ev.User.Username
}
