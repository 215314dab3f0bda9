package actions

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vilaca/portal/internal/core"
)

// Defaults of Options.
const (
	DefaultWorkers          = 4
	DefaultQueueSize        = 10000
	DefaultCacheSize        = 100000
	DefaultRateLimit        = "10/min"
	DefaultAdmissionDedup   = 5 * time.Second
	maxWindowEntriesPerSlot = 3600
)

// Options configure the engine.
type Options struct {
	// Env builds the actions.
	Env Env
	// Enabled lists the action types that may run; the others are
	// reported as disabled. Empty: none.
	Enabled []string
	// Workers run attempts in parallel; the attempts on one object run in
	// order, on one worker.
	Workers int
	// QueueSize bounds the attempts waiting, and separately the admission
	// verdicts waiting.
	QueueSize int
	// CacheSize bounds the idempotency keys and the rate-limit windows held.
	CacheSize int
	// DryRun logs what every action would do and changes nothing.
	DryRun bool
	// DefaultRateLimit applies to actions without rateLimit ("10/min").
	DefaultRateLimit string
	// AdmissionDedup is how long an admission verdict's action is not run
	// again for the same rule, target and action (as Falco Talon's 5s
	// deduplication RateLimit).
	AdmissionDedup time.Duration
	// Namespace is Portal's own namespace: never a target of a
	// destructive action.
	Namespace string
	// Protected namespaces are never targets of a destructive action.
	Protected []string
	// Recorder writes Events on the targets; nil writes none.
	Recorder events.EventRecorder
	Logger   *slog.Logger
	// Registerer receives the metrics; default controller-runtime's.
	Registerer prometheus.Registerer
	// Clock decides the rate limits and dedup windows; default the real
	// clock.
	Clock clock.PassiveClock
	// Forward, when set, takes the verdicts offered while this replica
	// does not lead, to carry them to the leader; without it they are
	// dropped and counted (not_leader).
	Forward core.VerdictSink
}

// Engine runs the response actions. It is a findings sink (Publish), an
// admission verdict sink (Offer) and a manager runnable (Start) that runs
// on the leader only.
type Engine struct {
	o        Options
	actions  map[string]Action
	enabled  map[string]bool
	defLimit RateLimit
	metrics  *Metrics
	log      *slog.Logger
	queues   []chan task
	verdicts chan core.Verdict
	running  atomic.Bool

	// mu guards what follows, and every call on keys and limits.
	mu sync.Mutex
	// held is, per object, the actions in effect for its open findings.
	held map[core.ObjectKey]map[string]*entry
	// keys is the idempotency LRU: every action in effect (or recently
	// run by an admission verdict) by key.
	keys *lru.Cache
	// limits holds a sliding RateLimit of attempt times per key.
	limits *lru.Cache
}

// entry is an action in effect on one object.
type entry struct {
	req       Request
	object    core.ObjectKey
	admission bool
	at        time.Time
}

// task is one attempt for a worker.
type task struct {
	req   Request
	entry *entry
	// result is a preset result (rate_limited, skipped), with its detail:
	// the attempt is recorded, not made.
	result, detail string
	observed       time.Time
	// charged is when the attempt took its place in the RateLimit (zero:
	// it took none); an attempt that does nothing gives it back.
	charged time.Time
}

// New returns an engine; add it to the manager and hand it to the findings
// pipeline as a sink and to admission as its VerdictSink.
func New(o Options) (*Engine, error) {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.DefaultRateLimit == "" {
		o.DefaultRateLimit = DefaultRateLimit
	}
	if o.AdmissionDedup <= 0 {
		o.AdmissionDedup = DefaultAdmissionDedup
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Env.Logger == nil {
		o.Env.Logger = o.Logger
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	def, err := ParseRateLimit(o.DefaultRateLimit)
	if err != nil {
		return nil, fmt.Errorf("default rate limit: %w", err)
	}
	e := &Engine{
		o: o, defLimit: def, metrics: NewMetrics(o.Registerer), log: o.Logger,
		actions: map[string]Action{}, enabled: map[string]bool{},
		verdicts: make(chan core.Verdict, o.QueueSize),
		held:     map[core.ObjectKey]map[string]*entry{},
		limits:   lru.New(o.CacheSize),
	}
	e.keys = lru.NewWithEvictionFunc(o.CacheSize, e.evicted)
	for _, t := range o.Enabled {
		f, ok := registry[t]
		if !ok {
			return nil, fmt.Errorf("action %q is not one of %v", t, Types())
		}
		e.enabled[t] = true
		e.actions[t] = f(o.Env)
	}
	for range o.Workers {
		e.queues = append(e.queues, make(chan task, max(1, o.QueueSize/o.Workers)))
	}
	return e, nil
}

// Metrics returns the engine's metrics.
func (e *Engine) Metrics() *Metrics { return e.metrics }

// Enabled reports whether action type t may run.
func (e *Engine) Enabled(t string) bool { return e.enabled[t] }

// Action returns the enabled action of type t.
func (e *Engine) Action(t string) (Action, bool) {
	a, ok := e.actions[t]
	return a, ok
}

// Name implements core.OutputSink.
func (*Engine) Name() string { return "actions" }

// NeedLeaderElection implements manager.LeaderElectionRunnable: actions
// run on the leader only.
func (*Engine) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: it runs the workers and the admission
// verdicts until ctx ends.
func (e *Engine) Start(ctx context.Context) error {
	e.running.Store(true)
	defer e.running.Store(false)
	var wg sync.WaitGroup
	for _, q := range e.queues {
		wg.Go(func() { e.work(ctx, q) })
	}
	wg.Go(func() { e.admissions(ctx) })
	e.log.Info("response actions started", "enabled", e.o.Enabled, "dryRun", e.o.DryRun, "workers", len(e.queues))
	wg.Wait()
	return nil
}

// Key is the idempotency key of one action on one object:
// sha256(rule, kind, namespace, name, action).
func Key(r *core.Rule, obj core.ResourceRef, a core.ActionSpec, index int) string {
	h := sha256.New()
	group, _, _ := strings.Cut(obj.APIVersion, "/")
	if !strings.Contains(obj.APIVersion, "/") {
		group = ""
	}
	for _, part := range []string{r.Source.Kind, r.Namespace, r.Name, group, obj.Kind, obj.Namespace, obj.Name, a.Type, strconv.Itoa(index)} {
		h.Write(binary.AppendUvarint(nil, uint64(len(part))))
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Publish implements core.OutputSink: it compares each object's open
// findings with the actions in effect on it, runs the new ones and undoes
// those whose finding cleared. It waits for room in the queues rather than
// drop: findings are state, and the pipeline holds the rest meanwhile.
func (e *Engine) Publish(ctx context.Context, b core.FindingBatch) error {
	e.mu.Lock()
	var tasks []task
	listed := map[core.ObjectKey]bool{}
	for i := range b.Objects {
		of := &b.Objects[i]
		listed[of.Object.Key()] = true
		tasks = e.stateLocked(of, tasks)
	}
	if b.Full {
		for key := range e.held {
			if !listed[key] {
				tasks = e.stateLocked(&core.ObjectFindings{Object: core.ResourceRef{APIVersion: key.APIVersion, Kind: key.Kind, Namespace: key.Namespace, Name: key.Name}}, tasks)
			}
		}
	}
	e.mu.Unlock()
	for _, t := range tasks {
		if err := e.enqueue(ctx, t); err != nil {
			return nil // ctx ended: the sink is stopping.
		}
	}
	return nil
}

// findingMode is the loop a producer's findings come from.
func findingMode(producer string) core.Mode {
	switch producer {
	case string(core.ModeAdmission):
		return core.ModeAdmission
	case string(core.ModeRuntime):
		return core.ModeRuntime
	}
	return core.ModeAudit
}

// stateLocked turns one object's state into tasks.
func (e *Engine) stateLocked(of *core.ObjectFindings, tasks []task) []task {
	key := of.Object.Key()
	// Ordered by finding and by the action's place in its rule, so the
	// actions on an object run in the order the rule lists them.
	var wants []Request
	want := map[string]bool{}
	for i := range of.Findings {
		f := &of.Findings[i]
		// A failure that carries an exception is exempted from the
		// actions (an exception of mode actions): reported, not acted on.
		if f.Outcome != core.OutcomeFail || f.Rule == nil || f.Exception != nil {
			continue
		}
		mode := findingMode(f.Producer)
		if mode == core.ModeRuntime {
			// A runtime finding is an event kept open for its window
			// (alerts, reports): its actions ran from the runtime
			// verdict, once, and are not undone when the window ends.
			continue
		}
		for ai, a := range f.Rule.Actions {
			if len(a.Modes) > 0 && !slices.Contains(a.Modes, mode) {
				continue
			}
			k := Key(f.Rule, of.Object, a, ai)
			if want[k] {
				continue // two containers of one object: one action.
			}
			want[k] = true
			wants = append(wants, Request{Rule: f.Rule, Spec: a, Index: ai, Object: of.Object, Message: f.Message, Mode: mode, Key: k})
		}
	}
	held := e.held[key]
	for _, req := range wants {
		k := req.Key
		if en := held[k]; en != nil {
			en.req.Rule, en.req.Spec, en.req.Message = req.Rule, req.Spec, req.Message
			continue
		}
		if v, ok := e.keys.Get(k); ok && v.(*entry).req.Object.UID == req.Object.UID {
			// An admission verdict on this very object already ran it:
			// adopt it, so it is undone when the finding clears. One
			// that named another UID (a forged review) is not adopted:
			// it will be skipped and must not stand for this one.
			en := v.(*entry)
			en.admission, en.req = false, req
			e.holdLocked(key, en)
			e.metrics.Actions.WithLabelValues(req.Spec.Type, ResultDuplicate).Inc()
			continue
		}
		t, ok := e.limitLocked(req)
		if !ok {
			tasks = append(tasks, t)
			continue
		}
		en := &entry{req: req, object: key, at: e.o.Clock.Now()}
		e.keys.Add(k, en)
		e.holdLocked(key, en)
		tasks = append(tasks, task{req: req, entry: en, observed: of.Observed, charged: t.charged})
	}
	for k, en := range held {
		if want[k] {
			continue
		}
		e.keys.Remove(k) // evicted() drops it from held.
		req := en.req
		req.Revert = true
		tasks = append(tasks, task{req: req, observed: of.Observed})
	}
	return tasks
}

func (e *Engine) holdLocked(key core.ObjectKey, en *entry) {
	m := e.held[key]
	if m == nil {
		m = map[string]*entry{}
		e.held[key] = m
	}
	m[en.req.Key] = en
}

// evicted keeps held in step with the LRU, under mu. An action pushed out
// by newer ones is no longer undone when its finding clears: the LRU bounds
// memory, and its size says how many actions in effect Portal tracks.
func (e *Engine) evicted(k lru.Key, v any) {
	en := v.(*entry)
	if m := e.held[en.object]; m != nil && m[k.(string)] == en {
		delete(m, k.(string))
		if len(m) == 0 {
			delete(e.held, en.object)
		}
	}
}

// forget drops an entry whose attempt did not take effect (it failed or
// was blocked), so the next change of the object tries again.
func (e *Engine) forget(en *entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if v, ok := e.keys.Get(en.req.Key); ok && v.(*entry) == en {
		e.keys.Remove(en.req.Key)
	}
}

// limitLocked counts an attempt in the rule and target's sliding RateLimit,
// returning a task with the time it charged. When the RateLimit is full it
// returns the rate_limited task instead.
func (e *Engine) limitLocked(req Request) (task, bool) {
	w := e.defLimit
	if s := req.Param("rateLimit"); s != "" {
		if pw, err := ParseRateLimit(s); err == nil {
			w = pw
		}
	}
	now := e.o.Clock.Now()
	var times []time.Time
	if v, ok := e.limits.Get(req.Key); ok {
		times = v.([]time.Time)
	}
	cut := 0
	for cut < len(times) && now.Sub(times[cut]) >= w.per {
		cut++
	}
	times = times[cut:]
	if len(times) >= w.count {
		e.limits.Add(req.Key, times)
		return task{req: req, result: ResultRateLimited}, false
	}
	e.limits.Add(req.Key, append(slices.Clip(times), now))
	return task{charged: now}, true
}

// refund gives back the RateLimit place an attempt charged at when it did
// nothing: an admission verdict on another object than the live one (a
// forged review) must not use up the target's RateLimit and hold back a
// genuine one.
func (e *Engine) refund(key string, charged time.Time) {
	if charged.IsZero() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	v, ok := e.limits.Get(key)
	if !ok {
		return
	}
	times := v.([]time.Time)
	if i := slices.Index(times, charged); i >= 0 {
		e.limits.Add(key, slices.Delete(slices.Clone(times), i, i+1))
	}
}

// Offer implements core.VerdictSink. It never blocks: a verdict that finds
// the queue full is counted and logged; one offered while this replica does
// not lead goes to Options.Forward, or is counted and logged without one.
func (e *Engine) Offer(v core.Verdict) {
	if !e.running.Load() && e.o.Forward != nil {
		e.o.Forward.Offer(v)
		return
	}
	e.Accept(v)
}

// Leading reports whether this replica runs the actions now.
func (e *Engine) Leading() bool { return e.running.Load() }

// Accept queues v for the actions of this replica, never forwarding it: a
// verdict forwarded here is not sent on again. It reports whether v was
// queued; a full queue, or this replica not leading, is counted and logged.
func (e *Engine) Accept(v core.Verdict) bool {
	if !e.running.Load() {
		e.drop("not_leader", v)
		return false
	}
	select {
	case e.verdicts <- v:
		return true
	default:
		e.drop("queue_full", v)
		return false
	}
}

func (e *Engine) drop(reason string, v core.Verdict) {
	e.metrics.Dropped.WithLabelValues(reason).Inc()
	e.log.Warn("response action dropped", "audit", "action", "reason", reason, "mode", v.LoopMode(), "rule", v.Rule.Name,
		"kind", v.Resource.Kind, "namespace", v.Resource.Namespace, "name", v.Resource.Name)
}

// admissions turns admission verdicts into tasks, off the webhook's path.
func (e *Engine) admissions(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case v := <-e.verdicts:
			for _, t := range e.verdictTasks(v) {
				if e.enqueue(ctx, t) != nil {
					return
				}
			}
		}
	}
}

func (e *Engine) verdictTasks(v core.Verdict) []task {
	e.mu.Lock()
	defer e.mu.Unlock()
	var tasks []task
	now := e.o.Clock.Now()
	mode := v.LoopMode()
	for ai, a := range v.Rule.Actions {
		if len(a.Modes) > 0 && !slices.Contains(a.Modes, mode) {
			continue
		}
		k := Key(v.Rule, v.Resource, a, ai)
		req := Request{Rule: v.Rule, Spec: a, Index: ai, Object: v.Resource, Message: v.Message, Mode: mode, Key: k}
		if v.Resource.UID == "" {
			// Nothing ties the verdict to one object: a forged review,
			// or a name the live object merely shares. Recorded without
			// taking the key or the target's rate limit.
			tasks = append(tasks, task{req: req, result: ResultSkipped, detail: "the " + string(mode) + " verdict names no object UID, so its object cannot be told from the live " + target(v.Resource) + ": not acted on"})
			continue
		}
		if x, ok := e.keys.Get(k); ok {
			// A verdict on another UID (a forged review still queued)
			// does not make this one a duplicate.
			if en := x.(*entry); !en.admission || (now.Sub(en.at) < e.o.AdmissionDedup && en.req.Object.UID == v.Resource.UID) {
				e.metrics.Actions.WithLabelValues(a.Type, ResultDuplicate).Inc()
				continue
			}
		}
		t, ok := e.limitLocked(req)
		if !ok {
			tasks = append(tasks, t)
			continue
		}
		en := &entry{req: req, object: v.Resource.Key(), admission: true, at: now}
		e.keys.Add(k, en)
		tasks = append(tasks, task{req: req, entry: en, observed: v.Observed, charged: t.charged})
	}
	return tasks
}

// enqueue hands a task to the worker of its object, so the attempts on one
// object run in order.
func (e *Engine) enqueue(ctx context.Context, t task) error {
	h := fnv.New32a()
	k := t.req.Object.Key()
	h.Write([]byte(k.Kind + "/" + k.Namespace + "/" + k.Name))
	q := e.queues[h.Sum32()%uint32(len(e.queues))]
	select {
	case q <- t:
		e.metrics.Queued.Inc()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Engine) work(ctx context.Context, q chan task) {
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-q:
			e.metrics.Queued.Dec()
			e.run(ctx, t)
		}
	}
}

// errNoAction is an enabled type without an implementation: a bug.
var errNoAction = errors.New("no such action")

// RateLimit is a rate limit: count attempts per duration.
type RateLimit struct {
	count int
	per   time.Duration
}

// ParseRateLimit reads COUNT/UNIT with UNIT s, min or h ("5/min").
func ParseRateLimit(s string) (RateLimit, error) {
	count, per, err := core.ParseRateLimit(s)
	if err != nil {
		return RateLimit{}, err
	}
	return RateLimit{count: min(count, maxWindowEntriesPerSlot), per: per}, nil
}
