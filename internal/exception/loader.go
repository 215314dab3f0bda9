package exception

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// Engine compiles exceptions and holds the set that applies; *engine.Engine
// is one.
type Engine interface {
	CompileException(x *core.Exception) (*engine.Exception, error)
	SetExceptions(xs []*engine.Exception)
}

// State is what the loader made of one exception object; the status
// reconciler writes it.
type State struct {
	Generation int64
	// Error says why the generation does not apply; Reason is the Ready
	// condition's reason for it.
	Error  string
	Reason string
	// Expires is the active exception's expiry (zero: never); Expired is
	// set once it has passed.
	Expires time.Time
	Expired bool
	// Exception is the loaded exception, nil when it does not apply.
	Exception *core.Exception
}

// Loader loads exception objects from the manager's cache into the engine,
// on every replica, and takes each out of the engine when it expires. Unlike
// a rule, an exception whose new generation is refused stops applying at
// once: keeping the last good generation would keep a hole open that its
// author meant to change.
type Loader struct {
	client  client.Reader
	engine  Engine
	clock   clock.WithDelayedExecution
	log     *slog.Logger
	metrics *Metrics
	// allowed lists where PortalExceptions are honoured
	// (--exception-namespaces); empty is everywhere.
	allowed []string
	// maxDuration bounds a PortalException's expires after its creation
	// (--exception-max-duration); 0 is no bound.
	maxDuration time.Duration

	mu     sync.Mutex
	states map[string]State
	active map[string]*engine.Exception
	timers map[string]clock.Timer
	// exempted counts the audited objects each exception exempts now,
	// by key.
	exempted map[string]int
	// onChange are told the kinds whose exceptions changed, after the
	// engine holds the new set: audit re-evaluates their objects.
	onChange []func(string, []schema.GroupKind)
	// changed tells the status reconciler of each kind that a state moved.
	changed map[string]chan event.GenericEvent
}

// Options configure a Loader.
type Options struct {
	// Clock decides expiry; the real clock when nil. Give the engine the
	// same one (engine.WithClock).
	Clock clock.WithDelayedExecution
	// AllowedNamespaces is --exception-namespaces.
	AllowedNamespaces []string
	// MaxDuration is --exception-max-duration.
	MaxDuration time.Duration
	Logger      *slog.Logger
	Metrics     *Metrics
}

// NewLoader returns a loader reading through c (the manager's cache).
func NewLoader(c client.Reader, eng Engine, o Options) *Loader {
	l := &Loader{
		client: c, engine: eng, clock: o.Clock, log: o.Logger, metrics: o.Metrics,
		allowed: slices.Clone(o.AllowedNamespaces), maxDuration: o.MaxDuration,
		states: map[string]State{}, active: map[string]*engine.Exception{}, timers: map[string]clock.Timer{},
		exempted: map[string]int{},
		changed: map[string]chan event.GenericEvent{
			KindCluster:    make(chan event.GenericEvent, 1024),
			KindNamespaced: make(chan event.GenericEvent, 1024),
		},
	}
	if l.clock == nil {
		l.clock = clock.RealClock{}
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.metrics == nil {
		l.metrics = NewMetrics(nil)
	}
	return l
}

// OnChange calls fn with the namespace and kinds an exception change
// concerns (namespace "" for a PortalClusterException: every namespace),
// after the engine holds the new set. A tenant editing its PortalException
// in a loop thereby re-evaluates only its own namespace's objects.
// Subscribe before the manager starts.
func (l *Loader) OnChange(fn func(namespace string, kinds []schema.GroupKind)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onChange = append(l.onChange, fn)
}

func key(kind, namespace, name string) string {
	return fmt.Sprintf("%s/%s/%s", kind, namespace, name)
}

// State returns the load state of one object.
func (l *Loader) State(kind, namespace, name string) (State, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.states[key(kind, namespace, name)]
	return s, ok
}

// SetupWithManager registers one loading controller per kind. They do not
// need leader election: every replica must hold the exceptions.
func (l *Loader) SetupWithManager(mgr ctrl.Manager) error {
	for _, kind := range []string{KindCluster, KindNamespaced} {
		err := ctrl.NewControllerManagedBy(mgr).
			Named("exception-loader-"+lower(kind)).
			For(newObject(kind), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
			Complete(reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				return ctrl.Result{}, l.reconcile(ctx, kind, req)
			}))
		if err != nil {
			return fmt.Errorf("set up %s loader: %w", kind, err)
		}
	}
	return nil
}

func (l *Loader) reconcile(ctx context.Context, kind string, req ctrl.Request) error {
	obj := newObject(kind)
	k := key(kind, req.Namespace, req.Name)
	if err := l.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			l.forget(k)
			l.log.Info("exception removed", "kind", kind, "namespace", req.Namespace, "name", req.Name)
			return nil
		}
		return err
	}
	st := l.load(kind, obj)
	if st.Error != "" {
		l.log.Warn("exception not applied", "kind", kind, "namespace", req.Namespace, "name", req.Name,
			"generation", obj.GetGeneration(), "reason", st.Reason, "error", st.Error)
	} else {
		l.log.Info("exception loaded", "kind", kind, "namespace", req.Namespace, "name", req.Name,
			"generation", obj.GetGeneration(), "expired", st.Expired, "reason", obj.GetExceptionSpec().Reason)
	}
	l.notify(kind, obj)
	return nil
}

// load compiles one exception object and makes it apply, or not.
func (l *Loader) load(kind string, obj policyv1alpha1.ExceptionObject) State {
	k := key(kind, obj.GetNamespace(), obj.GetName())
	st := State{Generation: obj.GetGeneration()}
	x, err := FromSpec(obj.GetExceptionSpec(), kind, obj.GetNamespace(), obj.GetName())
	var compiled *engine.Exception
	switch {
	case kind == KindNamespaced && !NamespaceAllowed(l.allowed, obj.GetNamespace()):
		st.Reason = policyv1alpha1.ReasonNamespaceNotAllowed
		st.Error = fmt.Sprintf("PortalExceptions are honoured only in the namespaces %v (--exception-namespaces); ask the platform team for a PortalClusterException", l.allowed)
	case err != nil:
		st.Reason, st.Error = policyv1alpha1.ReasonInvalidException, err.Error()
	case kind == KindNamespaced && l.tooLate(x, obj) != nil:
		st.Reason, st.Error = policyv1alpha1.ReasonExpiresTooLate, l.tooLate(x, obj).Error()
	default:
		if compiled, err = l.engine.CompileException(x); err != nil {
			st.Reason, st.Error = policyv1alpha1.ReasonInvalidException, err.Error()
		}
	}
	l.mu.Lock()
	prev := l.active[k]
	delete(l.active, k)
	l.stopTimerLocked(k)
	if compiled != nil {
		st.Exception, st.Expires = x, x.Expires
		st.Expired = x.ExpiredAt(l.clock.Now())
		if !st.Expired {
			l.active[k] = compiled
			l.scheduleLocked(kind, k, obj, x.Expires)
		}
	}
	l.states[k] = st
	l.publishLocked()
	changed, ns := kinds(prev, l.active[k]), scope(prev, l.active[k])
	l.mu.Unlock()
	l.tell(ns, changed)
	return st
}

// scheduleLocked arms the expiry of an active exception: at expires, it
// leaves the engine and the objects of its kinds are evaluated again.
func (l *Loader) scheduleLocked(kind, k string, obj policyv1alpha1.ExceptionObject, expires time.Time) {
	if expires.IsZero() {
		return
	}
	// The callback reads the clock, which a fake clock holds locked while
	// it runs its callbacks: expire on a goroutine of its own.
	l.timers[k] = l.clock.AfterFunc(expires.Sub(l.clock.Now()), func() { go l.expire(kind, k, obj) })
}

func (l *Loader) stopTimerLocked(k string) {
	if t, ok := l.timers[k]; ok {
		t.Stop()
		delete(l.timers, k)
	}
}

// expire takes k out of the engine if it is still the generation that was
// scheduled and has expired by the clock.
func (l *Loader) expire(kind, k string, obj policyv1alpha1.ExceptionObject) {
	l.mu.Lock()
	x := l.active[k]
	if x == nil || !x.ExpiredAt(l.clock.Now()) {
		l.mu.Unlock()
		return
	}
	delete(l.active, k)
	delete(l.timers, k)
	st := l.states[k]
	st.Expired = true
	l.states[k] = st
	l.publishLocked()
	l.mu.Unlock()
	l.tell(scope(x), kinds(x))
	l.metrics.Expired.Inc()
	l.log.Info("exception expired", "kind", kind, "namespace", obj.GetNamespace(), "name", obj.GetName(), "expires", x.Expires)
	l.notify(kind, obj)
}

func (l *Loader) forget(k string) {
	l.mu.Lock()
	prev := l.active[k]
	if st, ok := l.states[k]; ok && st.Exception != nil {
		l.metrics.forget(st.Exception.Ref())
	}
	delete(l.states, k)
	delete(l.active, k)
	delete(l.exempted, k)
	l.stopTimerLocked(k)
	l.publishLocked()
	l.mu.Unlock()
	l.tell(scope(prev), kinds(prev))
}

// publishLocked hands the engine the active set, in key order, and counts
// the states.
func (l *Loader) publishLocked() {
	set := make([]*engine.Exception, 0, len(l.active))
	for _, k := range slices.Sorted(maps.Keys(l.active)) {
		set = append(set, l.active[k])
	}
	l.engine.SetExceptions(set)
	counts := map[string]int{"active": 0, "expired": 0, "refused": 0}
	for _, st := range l.states {
		switch {
		case st.Error != "":
			counts["refused"]++
		case st.Expired:
			counts["expired"]++
		default:
			counts["active"]++
		}
	}
	for s, n := range counts {
		l.metrics.Loaded.WithLabelValues(s).Set(float64(n))
	}
}

// tell calls the subscribers with the kinds that changed, without holding
// mu: audit takes its own locks to requeue, and holds them while its
// findings reach SetExempted, which takes mu.
func (l *Loader) tell(namespace string, changed []schema.GroupKind) {
	if len(changed) == 0 {
		return
	}
	l.mu.Lock()
	subs := slices.Clone(l.onChange)
	l.mu.Unlock()
	for _, fn := range subs {
		fn(namespace, changed)
	}
}

// scope is the namespace the objects of xs are in: a PortalException's
// own, or "" (every namespace) when one is a PortalClusterException.
func scope(xs ...*engine.Exception) string {
	ns := ""
	for _, x := range xs {
		if x == nil {
			continue
		}
		if x.Namespace == "" || (ns != "" && ns != x.Namespace) {
			return ""
		}
		ns = x.Namespace
	}
	return ns
}

// kinds lists the kinds either generation of an exception matches.
func kinds(xs ...*engine.Exception) []schema.GroupKind {
	var out []schema.GroupKind
	for _, x := range xs {
		if x == nil {
			continue
		}
		for _, g := range x.Match.GVKs {
			if gk := (schema.GroupKind{Group: g.Group, Kind: g.Kind}); !slices.Contains(out, gk) {
				out = append(out, gk)
			}
		}
	}
	return out
}

// SetExempted implements findings.ExemptionCounter: audit's count of the
// objects x exempts now, which the status reconciler writes.
func (l *Loader) SetExempted(x *core.Exception, n int) {
	k := key(x.Kind, x.Namespace, x.Name)
	l.mu.Lock()
	if _, known := l.states[k]; !known && n > 0 {
		// Findings that outlive their exception drain to zero as audit
		// evaluates their objects again; only those are counted.
		l.mu.Unlock()
		return
	}
	if n <= 0 {
		delete(l.exempted, k)
	} else {
		l.exempted[k] = n
	}
	l.mu.Unlock()
	obj := newObject(x.Kind)
	obj.SetNamespace(x.Namespace)
	obj.SetName(x.Name)
	l.notify(x.Kind, obj)
}

// Exempted returns audit's count of the objects an exception exempts now.
func (l *Loader) Exempted(kind, namespace, name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exempted[key(kind, namespace, name)]
}

func (l *Loader) notify(kind string, obj policyv1alpha1.ExceptionObject) {
	// Never block loading on status: on a replica that is not the leader
	// nobody reads the channel.
	select {
	case l.changed[kind] <- event.GenericEvent{Object: obj}:
	default:
	}
}

// WaitLoaded blocks until every exception object in the cache has been
// processed at its current generation.
func (l *Loader) WaitLoaded(ctx context.Context) error {
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var cluster policyv1alpha1.PortalClusterExceptionList
		var namespaced policyv1alpha1.PortalExceptionList
		if l.client.List(ctx, &cluster) != nil || l.client.List(ctx, &namespaced) != nil {
			return false, nil
		}
		for i := range cluster.Items {
			if !l.processed(KindCluster, &cluster.Items[i]) {
				return false, nil
			}
		}
		for i := range namespaced.Items {
			if !l.processed(KindNamespaced, &namespaced.Items[i]) {
				return false, nil
			}
		}
		return true, nil
	})
}

func (l *Loader) processed(kind string, obj policyv1alpha1.ExceptionObject) bool {
	st, ok := l.State(kind, obj.GetNamespace(), obj.GetName())
	return ok && st.Generation >= obj.GetGeneration()
}

func newObject(kind string) policyv1alpha1.ExceptionObject {
	if kind == KindCluster {
		return &policyv1alpha1.PortalClusterException{}
	}
	return &policyv1alpha1.PortalException{}
}

func lower(kind string) string {
	if kind == KindCluster {
		return "portalclusterexception"
	}
	return "portalexception"
}

func (l *Loader) tooLate(x *core.Exception, obj policyv1alpha1.ExceptionObject) error {
	return ExpiresTooLate(x.Expires, obj.GetCreationTimestamp().Time, l.maxDuration)
}

// ExpiresTooLate says why a PortalException created at created, expiring at
// expires (zero: never), is past the bound max (--exception-max-duration;
// 0: none), or returns nil. The bound counts from creation, not from now:
// an exception cannot be kept open by moving expires forward, only by a new
// object, which is a new review.
func ExpiresTooLate(expires, created time.Time, max time.Duration) error {
	if max <= 0 {
		return nil
	}
	latest := created.Add(max).UTC().Truncate(time.Second)
	if expires.IsZero() {
		return fmt.Errorf("spec.expires is required: PortalExceptions may apply for at most %s (--exception-max-duration); set it on or before %s", max, latest.Format(time.RFC3339))
	}
	if expires.After(latest) {
		return fmt.Errorf("spec.expires %s is more than %s after the exception's creation (--exception-max-duration); set it on or before %s, or ask the platform team for a PortalClusterException", expires.UTC().Format(time.RFC3339), max, latest.Format(time.RFC3339))
	}
	return nil
}
