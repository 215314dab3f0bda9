package lookup

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/engine"
)

// Cache is the shared cluster cache as the watcher uses it.
type Cache interface {
	Reader
	// Watch makes the cache hold gvr in namespace ("" for all namespaces)
	// until release is called, and calls fn with the labels of every
	// object added (old nil), updated, or deleted (new nil), from the
	// cache's own goroutines. Periodic resyncs are not changes.
	// synced, when not nil, is called once the watch has listed its
	// objects.
	Watch(ctx context.Context, gvr schema.GroupVersionResource, namespace string, fn func(ns, name string, old, new labels.Labels), synced func()) (release func(), err error)
}

// Requeuer evaluates an object again: audit's hook.
type Requeuer interface {
	Requeue(obj ObjectKey)
}

// AccessChecker tells whether Portal may list and watch a resource.
type AccessChecker interface {
	// CanWatch reports whether list and watch of gvr in namespace ("" for
	// all) are allowed, and if not, why.
	CanWatch(ctx context.Context, gvr schema.GroupVersionResource, namespace string) (allowed bool, reason string, err error)
}

// Reasons of a rule's Lookups condition.
const (
	ReasonLookupsReady      = policyv1alpha1.ReasonLookupsWatched
	ReasonUnknownResource   = policyv1alpha1.ReasonLookupResourceUnknown
	ReasonLookupForbidden   = policyv1alpha1.ReasonLookupWatchForbidden
	ReasonLookupOutOfScope  = policyv1alpha1.ReasonLookupOutOfNamespace
	ReasonLookupWatchFailed = policyv1alpha1.ReasonLookupWatchFailed
)

// RuleStatus is what the watcher made of one rule's lookups.
type RuleStatus struct {
	// Resources are the resources the rule reads, as group/resource
	// ("policy/poddisruptionbudgets", "/services" for the core group).
	Resources []string
	// Reason and Message say why the rule's lookups cannot all be
	// answered; Reason is ReasonLookupsReady when they can.
	Reason, Message string
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	Engine   *engine.Engine
	Cache    Cache
	Resolver Resolver
	// Index and Requeuer turn changes into re-evaluations; without them
	// (admission only) the watcher only keeps the cache warm.
	Index    *DepIndex
	Requeuer Requeuer
	// Access, when set, checks that the watches are allowed.
	Access AccessChecker
	// CycleLimit re-evaluations of a rule on an object are allowed per
	// CycleWindow; defaults DefaultCycleLimit and DefaultCycleWindow.
	// Past it a pair gets one trailing re-evaluation when the window
	// allows; MaxPending bounds how many pairs wait for one (default
	// DefaultMaxDependencies, the index's bound: a pending pair is one of
	// its dependents).
	CycleLimit  int
	CycleWindow time.Duration
	MaxPending  int
	Metrics     *Metrics
	Logger      *slog.Logger
	// OnStatus hears of every rule whose lookup status changed.
	OnStatus func(RuleKey)
	// Clock times the cycle windows, the permission answers' lifetime
	// and the rate of warnings; default the real clock.
	Clock clock.WithDelayedExecution
}

type watchKey struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// Watcher starts the cache watches the enabled rules' lookups need, keeps
// each rule's lookup status, and turns changes of what was read into
// re-evaluations of what read it.
type Watcher struct {
	o     WatcherOptions
	guard *cycleGuard

	requeuer atomic.Pointer[Requeuer]
	changed  chan struct{}

	mu       sync.Mutex
	watches  map[watchKey]func()
	statuses map[RuleKey]RuleStatus
	// access holds recent permission checks by watch (accessTTL).
	access map[watchKey]accessAnswer
	// dropLogged is when the last "pending set full" warning was logged.
	dropLogged atomic.Int64
}

// RequeueFunc adapts a function to Requeuer.
type RequeueFunc func(ObjectKey)

// Requeue implements Requeuer.
func (f RequeueFunc) Requeue(o ObjectKey) { f(o) }

// SetRequeuer sets where re-evaluations go: the audit layer, once it is set
// up. Until then changes re-queue nothing.
func (w *Watcher) SetRequeuer(r Requeuer) { w.requeuer.Store(&r) }

// Notify tells the running watcher that the rule set changed; it never
// blocks.
func (w *Watcher) Notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// ResourcesChanged tells the watcher that the API server's resources
// changed (a CustomResourceDefinition was created or became established):
// a rule whose lookups named a resource not served yet is resolved again,
// so it starts reading it without an edit. It never blocks.
func (w *Watcher) ResourcesChanged() {
	w.mu.Lock()
	unknown := false
	for _, st := range w.statuses {
		if st.Reason == ReasonUnknownResource {
			unknown = true
			break
		}
	}
	w.mu.Unlock()
	if unknown {
		w.Notify()
	}
}

// Start implements manager.Runnable: it follows the rule set until ctx
// ends, then releases every watch. It runs on every replica, since
// admission reads the cache on each.
func (w *Watcher) Start(ctx context.Context) error {
	defer w.Stop()
	w.RulesChanged(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.changed:
			w.RulesChanged(ctx)
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (w *Watcher) NeedLeaderElection() bool { return false }

// NewWatcher returns a watcher; call RulesChanged to start its watches.
func NewWatcher(o WatcherOptions) *Watcher {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil, nil)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	w := &Watcher{o: o, changed: make(chan struct{}, 1), watches: map[watchKey]func(){}, statuses: map[RuleKey]RuleStatus{}, access: map[watchKey]accessAnswer{}}
	w.guard = newCycleGuard(o.Clock, o.CycleLimit, o.CycleWindow, o.MaxPending, w.trailing)
	o.Metrics.setPending(w.guard.pendingLen)
	if o.Requeuer != nil {
		w.SetRequeuer(o.Requeuer)
	}
	return w
}

// Status returns the lookup status of a rule that reads the cluster.
func (w *Watcher) Status(k RuleKey) (RuleStatus, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.statuses[k]
	return st, ok
}

// Watches lists the running watches as resource[/namespace], sorted.
func (w *Watcher) Watches() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for k := range w.watches {
		s := k.gvr.Resource + "." + k.gvr.Group
		if k.namespace != "" {
			s += "/" + k.namespace
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// RulesChanged starts the watches the enabled rules need and stops the
// others. A PortalRule's lookups are watched in its namespace only, so a
// tenant's rule cannot make Portal cache every namespace.
func (w *Watcher) RulesChanged(ctx context.Context) {
	want := map[watchKey]bool{}
	statuses := map[RuleKey]RuleStatus{}
	for _, r := range w.o.Engine.Rules() {
		if !r.Enabled || len(r.Lookups()) == 0 {
			continue
		}
		statuses[RuleKeyOf(r.Rule)] = w.ruleStatus(ctx, r, want)
	}
	// A namespaced watch is redundant beside a cluster-wide one.
	for k := range want {
		if k.namespace != "" && want[watchKey{gvr: k.gvr}] {
			delete(want, k)
		}
	}
	w.mu.Lock()
	var stop []func()
	for k, release := range w.watches {
		if !want[k] {
			stop = append(stop, release)
			delete(w.watches, k)
		}
	}
	var start []watchKey
	for k := range want {
		if _, ok := w.watches[k]; !ok {
			start = append(start, k)
		}
	}
	w.mu.Unlock()
	for _, release := range stop {
		release()
	}
	failed := map[schema.GroupVersionResource]string{}
	for _, k := range start {
		gvr := k.gvr
		release, err := w.o.Cache.Watch(ctx, gvr, k.namespace,
			func(ns, name string, old, new labels.Labels) { w.Changed(gvr, ns, name, old, new) },
			func() { w.Synced(gvr, k.namespace) })
		if err != nil {
			failed[gvr] = err.Error()
			w.o.Logger.Error("lookup watch not started", "resource", gvr.String(), "namespace", k.namespace, "error", err)
			continue
		}
		w.o.Logger.Info("lookup watching", "resource", gvr.String(), "namespace", k.namespace)
		w.mu.Lock()
		w.watches[k] = release
		w.mu.Unlock()
	}
	w.setStatuses(statuses, failed)
	w.mu.Lock()
	maps.DeleteFunc(w.access, func(k watchKey, _ accessAnswer) bool { return !want[k] })
	w.mu.Unlock()
	// A rule disabled, deleted or without lookups any more is not
	// re-evaluated for what it read.
	keep := func(k RuleKey) bool {
		_, ok := statuses[k]
		return ok
	}
	w.guard.forgetRules(keep)
	if w.o.Index != nil {
		w.o.Index.ForgetRules(keep)
	}
}

// Forget drops what cycle protection and the dependency index hold for
// obj, its pending trailing re-evaluations first: the object is gone.
// Audit calls it when an evaluated object's deletion is processed.
func (w *Watcher) Forget(obj ObjectKey) {
	w.guard.forgetObject(obj)
	if w.o.Index == nil {
		return
	}
	w.mu.Lock()
	rules := slices.Collect(maps.Keys(w.statuses))
	w.mu.Unlock()
	for _, r := range rules {
		w.o.Index.Forget(Dependent{Rule: r, Object: obj})
	}
}

// ruleStatus resolves r's lookups, adds the watches they need to want and
// returns r's status.
func (w *Watcher) ruleStatus(ctx context.Context, r *engine.Rule, want map[watchKey]bool) RuleStatus {
	st := RuleStatus{Reason: ReasonLookupsReady, Message: "every resource the rule reads is watched"}
	problem := func(reason, msg string) {
		if st.Reason == ReasonLookupsReady {
			st.Reason, st.Message = reason, msg
		}
	}
	for _, l := range r.Lookups() {
		res, err := w.o.Resolver.Resolve(l.Resource)
		if err != nil {
			problem(ReasonUnknownResource, fmt.Sprintf("cluster.%s: %v", l.Resource, err))
			continue
		}
		name := res.GVR.Group + "/" + res.GVR.Resource
		if !slices.Contains(st.Resources, name) {
			st.Resources = append(st.Resources, name)
		}
		k := watchKey{gvr: res.GVR}
		if r.Namespace != "" {
			if !res.Namespaced {
				problem(ReasonLookupOutOfScope, fmt.Sprintf("cluster.%s: %s is cluster-scoped; a PortalRule reads only its own namespace", l.Resource, res.GVR.Resource))
				continue
			}
			k.namespace = r.Namespace
		}
		want[k] = true
		if w.o.Access != nil {
			ok, why, err := w.canWatch(ctx, k)
			switch {
			case err != nil:
				w.o.Logger.Warn("lookup access check failed", "resource", res.GVR.String(), "error", err)
			case !ok:
				where := "in every namespace"
				if k.namespace != "" {
					where = "in namespace " + k.namespace
				}
				problem(ReasonLookupForbidden, fmt.Sprintf("cluster.%s: Portal may not list and watch %s %s (%s): grant get, list, watch on it to Portal's ServiceAccount (Helm value watchedGvks)", l.Resource, name, where, why))
			}
		}
	}
	sort.Strings(st.Resources)
	return st
}

func (w *Watcher) setStatuses(statuses map[RuleKey]RuleStatus, failed map[schema.GroupVersionResource]string) {
	var changed []RuleKey
	w.mu.Lock()
	for k, st := range statuses {
		if st.Reason == ReasonLookupsReady {
			for gvr, msg := range failed {
				if slices.Contains(st.Resources, gvr.Group+"/"+gvr.Resource) {
					st.Reason, st.Message = ReasonLookupWatchFailed, fmt.Sprintf("watch of %s did not start: %s", gvr.Resource, msg)
					statuses[k] = st
				}
			}
		}
		if old, ok := w.statuses[k]; !ok || old.Reason != st.Reason || old.Message != st.Message || !slices.Equal(old.Resources, st.Resources) {
			changed = append(changed, k)
		}
	}
	for k := range w.statuses {
		if _, ok := statuses[k]; !ok {
			changed = append(changed, k)
		}
	}
	w.statuses = statuses
	w.mu.Unlock()
	if w.o.OnStatus != nil {
		for _, k := range changed {
			w.o.OnStatus(k)
		}
	}
}

// Stop releases every watch and drops the pending trailing
// re-evaluations.
func (w *Watcher) Stop() {
	w.guard.stop()
	w.mu.Lock()
	watches := w.watches
	w.watches = map[watchKey]func(){}
	w.mu.Unlock()
	for _, release := range watches {
		release()
	}
}

// Synced re-queues everything that read gvr in namespace ("" for all):
// evaluations that ran before the watch had listed its objects failed to
// read them (the cache refuses reads it cannot answer in full).
func (w *Watcher) Synced(gvr schema.GroupVersionResource, namespace string) {
	rp := w.requeuer.Load()
	if w.o.Index == nil || rp == nil {
		return
	}
	queued := map[ObjectKey]bool{}
	for _, dep := range w.o.Index.Reading(gvr, namespace) {
		if !queued[dep.Object] {
			queued[dep.Object] = true
			w.o.Metrics.Requeues.Inc()
			(*rp).Requeue(dep.Object)
		}
	}
}

// Changed re-queues what read the object gvr ns/name, added (old nil),
// changed, or deleted (new nil); old and new are its labels. A pair past
// the cycle limit is re-queued once more when its window allows.
func (w *Watcher) Changed(gvr schema.GroupVersionResource, ns, name string, old, new labels.Labels) {
	rp := w.requeuer.Load()
	if w.o.Index == nil || rp == nil {
		return
	}
	requeuer := *rp
	deps := w.o.Index.Affected(gvr, ns, name, old, new)
	queued := map[ObjectKey]bool{}
	for _, dep := range deps {
		v, streak := w.guard.allow(dep)
		if v != allowed {
			w.suppressed(dep, v, streak, gvr.Resource+" "+ns+"/"+name)
			continue
		}
		if queued[dep.Object] {
			continue
		}
		queued[dep.Object] = true
		w.o.Metrics.Requeues.Inc()
		requeuer.Requeue(dep.Object)
	}
}

// suppressed counts and logs a re-evaluation past the cycle limit: once per
// pair and window when it is deferred, at most once a window when the
// pending set is full.
func (w *Watcher) suppressed(dep Dependent, v verdict, streak int, changed string) {
	w.o.Metrics.CycleSuppressed.Inc()
	switch v {
	case deferred:
		// A burst of changes defers a pair once; only a pair deferred
		// window after window is likely a cycle worth a warning.
		level, msg := slog.LevelDebug, "lookup re-evaluation deferred: a burst of changes to what the rule reads; it is evaluated once more when the window allows"
		if streak >= CycleWarnStreak {
			level, msg = slog.LevelWarn, "lookup re-evaluation suppressed: the rule re-evaluated this object too often, window after window, after changes to what it reads (a cycle?); it is evaluated once more when the window allows"
		}
		w.o.Logger.Log(context.Background(), level, msg,
			"rule", dep.Rule.String(), "object", dep.Object.String(), "limit", w.guard.limit, "window", w.guard.window.String(),
			"windows", streak, "changed", changed)
	case dropped:
		w.o.Metrics.CycleDropped.Inc()
		now := w.o.Clock.Now().UnixNano()
		last := w.dropLogged.Load()
		if now-last >= int64(w.guard.window) && w.dropLogged.CompareAndSwap(last, now) {
			w.o.Logger.Warn("lookup re-evaluation dropped: too many rule/object pairs wait for a trailing re-evaluation; the periodic resync evaluates them again",
				"rule", dep.Rule.String(), "object", dep.Object.String(), "max_pending", w.guard.maxPending, "changed", changed)
		}
	}
}

// trailing re-queues the objects of the pairs whose trailing re-evaluation
// is due.
func (w *Watcher) trailing(deps []Dependent) {
	rp := w.requeuer.Load()
	if rp == nil {
		return
	}
	queued := map[ObjectKey]bool{}
	for _, dep := range deps {
		if queued[dep.Object] {
			continue
		}
		queued[dep.Object] = true
		w.o.Metrics.Requeues.Inc()
		(*rp).Requeue(dep.Object)
	}
}

// Every rule change re-resolves the lookups of every rule, and each check
// is two SubjectAccessReviews: without reuse a tenant creating rules in a
// loop, each with a few lookups, would have Portal send the API server two
// reviews per lookup of every rule in the cluster per change, before any
// namespace's new watch starts. A check is reused for accessTTL, a refusal
// for less, so a grant shows at the first rule change a few seconds on.
const (
	accessTTL        = time.Minute
	accessRefusedTTL = 5 * time.Second
)

type accessAnswer struct {
	ok  bool
	why string
	at  time.Time
}

// canWatch answers Access.CanWatch for k, from a recent answer when there
// is one. Errors are not kept: the next change asks again.
func (w *Watcher) canWatch(ctx context.Context, k watchKey) (bool, string, error) {
	now := w.o.Clock.Now()
	w.mu.Lock()
	a, ok := w.access[k]
	w.mu.Unlock()
	if ok {
		ttl := accessTTL
		if !a.ok {
			ttl = accessRefusedTTL
		}
		if now.Sub(a.at) < ttl {
			return a.ok, a.why, nil
		}
	}
	allowed, why, err := w.o.Access.CanWatch(ctx, k.gvr, k.namespace)
	if err != nil {
		return false, "", err
	}
	w.mu.Lock()
	w.access[k] = accessAnswer{ok: allowed, why: why, at: now}
	w.mu.Unlock()
	return allowed, why, nil
}

// Cache is the cache the watcher acquires watches in.
func (w *Watcher) Cache() Cache { return w.o.Cache }
