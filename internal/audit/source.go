package audit

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// queueKey names one object of one watched resource.
type queueKey struct {
	w         *resourceWatch
	namespace string
	name      string
}

// Source is the audit event source: one informer of the cluster cache per
// resource that enabled audit rules match (cluster-wide when a cluster-wide rule matches it, else
// one per namespace whose PortalRules match it), a rate-limited work queue
// served round-robin across namespaces, and a bounded pool of workers
// that evaluate the queued objects and record their findings in the store.
// It never polls: objects are evaluated on watch events, on rule changes and
// on the periodic resync (the safety net). It runs on every replica.
type Source struct {
	eng         *engine.Engine
	mapper      meta.RESTMapper
	cache       *clustercache.Cache
	store       *Store
	counter     RuleCounter
	log         *slog.Logger
	metrics     *Metrics
	resync      time.Duration
	workers     int
	syncTimeout time.Duration
	retry       time.Duration
	evalTimeout time.Duration
	rulesLoaded <-chan struct{}
	gone        func(gvk schema.GroupVersionKind, namespace, name string)
	clock       clock.WithTicker

	queue   workqueue.TypedRateLimitingInterface[queueKey]
	watches watchSet

	mu sync.Mutex
	// pending holds the queued keys with the time their first event since
	// the last evaluation was observed.
	pending  map[queueKey]time.Time
	inflight int
	idle     chan struct{}

	// ruleSets remembers the audit rules of each kind, to re-evaluate the
	// objects of a kind when its rules change.
	ruleSets   map[schema.GroupKind][]*engine.Rule
	unresolved map[core.GVK]string

	rulesChanged chan struct{}
	synced       chan struct{}
}

func newSource(o *Options, eng *engine.Engine, mapper meta.RESTMapper, cc *clustercache.Cache, store *Store, m *Metrics) *Source {
	return &Source{
		eng: eng, mapper: mapper, cache: cc, store: store, counter: o.RuleCounter,
		log: o.Logger, metrics: m, resync: o.ResyncPeriod, workers: o.Workers,
		syncTimeout: o.SyncTimeout, retry: o.RetryInterval, rulesLoaded: o.RulesLoaded, evalTimeout: o.EvalTimeout, gone: o.Gone, clock: o.Clock,
		// One namespace's thousands of objects must not queue ahead of
		// another namespace's single change: see fairQueue.
		queue:        newFairWorkqueue("portal-audit", func(k queueKey) string { return k.namespace }, m.QueueNamespaces),
		watches:      watchSet{m: map[watchKey]*resourceWatch{}},
		pending:      map[queueKey]time.Time{},
		idle:         make(chan struct{}, 1),
		ruleSets:     map[schema.GroupKind][]*engine.Rule{},
		unresolved:   map[core.GVK]string{},
		rulesChanged: make(chan struct{}, 1),
		synced:       make(chan struct{}),
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica watches and evaluates, so a new leader has the full state at once.
func (s *Source) NeedLeaderElection() bool { return false }

// Synced is closed once the informers of the rules loaded at start have
// delivered their initial lists and every object in them was evaluated: from
// then on the store holds the full state.
func (s *Source) Synced() <-chan struct{} { return s.synced }

// RulesChanged tells the source that the rule set changed; it starts and
// stops informers and re-evaluates the objects whose rules changed.
func (s *Source) RulesChanged() {
	select {
	case s.rulesChanged <- struct{}{}:
	default:
	}
}

// Start implements manager.Runnable: it runs until ctx ends.
func (s *Source) Start(ctx context.Context) error {
	if s.rulesLoaded != nil {
		select {
		case <-s.rulesLoaded:
		case <-ctx.Done():
			return nil
		}
	}
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() {
			for s.processNext() {
			}
		})
	}
	defer func() {
		s.queue.ShutDown()
		for _, w := range s.watches.list() {
			w.stop()
		}
		wg.Wait()
	}()
	started := s.reconcile(ctx)
	go s.waitSynced(ctx, started)

	retry := s.clock.NewTimer(s.retry)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.rulesChanged:
			s.reconcile(ctx)
		case <-retry.C():
			s.mu.Lock()
			n := len(s.unresolved)
			s.mu.Unlock()
			if n > 0 {
				s.reconcile(ctx)
			}
			retry.Reset(s.retry)
		}
	}
}

// waitSynced closes s.synced once the first informers synced and the queue
// drained. An informer that cannot sync (no RBAC, kind gone) delays this by
// at most the sync timeout, then it is logged and the sinks start without it.
func (s *Source) waitSynced(ctx context.Context, watches []*resourceWatch) {
	for _, w := range watches {
		if !w.waitSynced(ctx, s.syncTimeout) {
			if ctx.Err() != nil {
				return
			}
			s.log.Error("audit informer did not sync in time; publishing without it", "resource", w.resourceLabel(), "timeout", s.syncTimeout)
		}
	}
	for {
		s.mu.Lock()
		idle := len(s.pending) == 0 && s.inflight == 0
		s.mu.Unlock()
		if idle {
			break
		}
		select {
		case <-s.idle:
		case <-ctx.Done():
			return
		}
	}
	s.log.Info("audit initial evaluation done", "resources", len(watches), "objectsWithFindings", s.store.Len())
	close(s.synced)
}

// reconcile starts an informer for every resource (and namespace) the audit
// rules match and stops the others, and re-queues the objects of kinds whose
// rules changed. It returns the informers it started.
func (s *Source) reconcile(ctx context.Context) []*resourceWatch {
	want := s.wantedResources()
	var started []*resourceWatch
	s.watches.mu.Lock()
	for key, w := range s.watches.m {
		if _, ok := want.watches[key]; !ok {
			delete(s.watches.m, key)
			s.stopWatch(w, want)
		}
	}
	for key, t := range want.watches {
		if _, ok := s.watches.m[key]; ok {
			continue
		}
		w, err := s.startWatch(key, t.gvk, t.namespaced)
		if err != nil {
			s.log.Error("audit informer not started", "resource", key.gvr.String(), "namespace", key.namespace, "error", err)
			continue
		}
		s.watches.m[key] = w
		started = append(started, w)
		go s.pruneAfterSync(ctx, w)
		s.log.Info("audit watching", "resource", key.gvr.String(), "namespace", key.namespace)
	}
	watches := make([]*resourceWatch, 0, len(s.watches.m))
	for _, w := range s.watches.m {
		watches = append(watches, w)
	}
	s.setWatchMetricsLocked()
	s.watches.mu.Unlock()

	s.requeueChangedKinds(watches, started)
	return started
}

// setWatchMetricsLocked sets the watch gauges from the running informers;
// the caller holds s.watches.mu.
func (s *Source) setWatchMetricsLocked() {
	resources := map[schema.GroupVersionResource]bool{}
	s.metrics.Informers.Reset()
	for key, w := range s.watches.m {
		resources[key.gvr] = true
		s.metrics.Informers.WithLabelValues(w.resourceLabel(), key.scope()).Inc()
	}
	s.metrics.Watched.Set(float64(len(resources)))
}

type wanted struct {
	gvk        schema.GroupVersionKind
	namespaced bool
}

// wantedSet is what the audit rules need watched: each informer, and for
// each resource whether it is watched cluster-wide or in which namespaces.
type wantedSet struct {
	watches map[watchKey]wanted
	// cluster holds the resources watched in every namespace; the others
	// are watched only in the namespaces of their keys.
	cluster map[schema.GroupVersionResource]bool
}

// covers reports whether the objects of gvr in namespace ns stay watched.
func (ws wantedSet) covers(gvr schema.GroupVersionResource, ns string) bool {
	if ws.cluster[gvr] {
		return true
	}
	_, ok := ws.watches[watchKey{gvr: gvr, namespace: ns}]
	return ns != "" && ok
}

// wantedResources resolves the kinds of the enabled audit rules to
// resources. A kind only PortalRules match is watched only in their
// namespaces, since they never match an object elsewhere: a tenant's rule
// cannot make Portal list, watch and cache every namespace's objects. A
// cluster-scoped kind only PortalRules match is not watched at all. A kind
// the API server does not serve is logged once and retried every
// RetryInterval.
func (s *Source) wantedResources() wantedSet {
	type scope struct {
		wanted
		cluster    bool
		namespaces map[string]bool
	}
	byGVR := map[schema.GroupVersionResource]*scope{}
	unresolved := map[core.GVK]string{}
	for g, namespaces := range s.eng.GVKNamespaces(core.ModeAudit) {
		gk := schema.GroupKind{Group: g.Group, Kind: g.Kind}
		var versions []string
		if g.Version != "" {
			versions = []string{g.Version}
		}
		m, err := s.mapper.RESTMapping(gk, versions...)
		if err != nil {
			unresolved[g] = err.Error()
			continue
		}
		namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
		if namespaces != nil && !namespaced {
			continue
		}
		sc := byGVR[m.Resource]
		if sc == nil {
			sc = &scope{wanted: wanted{gvk: m.GroupVersionKind, namespaced: namespaced}, namespaces: map[string]bool{}}
			byGVR[m.Resource] = sc
		}
		if namespaces == nil {
			sc.cluster = true
		}
		for _, ns := range namespaces {
			sc.namespaces[ns] = true
		}
	}
	want := wantedSet{watches: map[watchKey]wanted{}, cluster: map[schema.GroupVersionResource]bool{}}
	for gvr, sc := range byGVR {
		if sc.cluster {
			want.cluster[gvr] = true
			want.watches[watchKey{gvr: gvr}] = sc.wanted
			continue
		}
		for ns := range sc.namespaces {
			want.watches[watchKey{gvr: gvr, namespace: ns}] = sc.wanted
		}
	}
	s.mu.Lock()
	for g, msg := range unresolved {
		if _, known := s.unresolved[g]; !known {
			s.log.Warn("audit rule kind not served by the API server; retrying", "kind", g.String(), "error", msg)
		}
	}
	s.unresolved = unresolved
	s.mu.Unlock()
	return want
}

// stopWatch stops an informer no rule needs any more and drops the
// findings of its objects that no other wanted informer watches: when a
// namespaced watch gives way to a cluster-wide one, or back, the findings
// of the objects still watched stay (with their first sight) until the new
// informer evaluates them again.
func (s *Source) stopWatch(w *resourceWatch, want wantedSet) {
	w.stop()
	apiVersion, kind := w.gvk.GroupVersion().String(), w.gvk.Kind
	s.store.DeleteFunc(func(k core.ObjectKey) bool {
		return k.APIVersion == apiVersion && k.Kind == kind &&
			(w.namespace == "" || k.Namespace == w.namespace) && !want.covers(w.gvr, k.Namespace)
	}, s.clock.Now())
	s.log.Info("audit stopped watching", "resource", w.gvr.String(), "namespace", w.namespace)
}

// pruneAfterSync drops, once w has listed its objects, the findings of
// objects in its scope that it does not have: objects deleted while no
// informer watched them, when a cluster-wide informer and namespaced ones
// took over from each other and the findings were kept across.
func (s *Source) pruneAfterSync(ctx context.Context, w *resourceWatch) {
	if !w.waitSynced(ctx, s.syncTimeout) {
		return
	}
	w.evaluating.RLock()
	defer w.evaluating.RUnlock()
	if w.stopped.Load() {
		return
	}
	apiVersion, kind := w.gvk.GroupVersion().String(), w.gvk.Kind
	s.store.DeleteFunc(func(k core.ObjectKey) bool {
		if k.APIVersion != apiVersion || k.Kind != kind || (w.namespace != "" && k.Namespace != w.namespace) {
			return false
		}
		_, exists := w.handle.Object(k.Namespace, k.Name)
		return !exists
	}, s.clock.Now())
}

// WatchScope is one running informer: a resource, watched in one namespace
// or, with Namespace empty, in all.
type WatchScope struct {
	Resource  schema.GroupVersionResource
	Namespace string
}

// Watches lists the running informers, by resource and namespace.
func (s *Source) Watches() []WatchScope {
	var out []WatchScope
	for _, w := range s.watches.list() {
		out = append(out, WatchScope{Resource: w.gvr, Namespace: w.namespace})
	}
	slices.SortFunc(out, func(a, b WatchScope) int {
		return cmp.Or(cmp.Compare(a.Resource.String(), b.Resource.String()), cmp.Compare(a.Namespace, b.Namespace))
	})
	return out
}

// requeueChangedKinds re-queues every cached object of the running informers
// whose kind's audit rules changed. New informers list their objects anyway.
func (s *Source) requeueChangedKinds(watches, started []*resourceWatch) {
	sets := map[schema.GroupKind][]*engine.Rule{}
	for _, r := range s.eng.Rules() {
		if !r.Enabled || !r.HasMode(core.ModeAudit) {
			continue
		}
		for _, g := range r.Match.GVKs {
			gk := schema.GroupKind{Group: g.Group, Kind: g.Kind}
			if !slices.Contains(sets[gk], r) {
				sets[gk] = append(sets[gk], r)
			}
		}
	}
	s.mu.Lock()
	prev := s.ruleSets
	s.ruleSets = sets
	s.mu.Unlock()
	now := s.clock.Now()
	for _, w := range watches {
		gk := w.gvk.GroupKind()
		if slices.Contains(started, w) || slices.Equal(prev[gk], sets[gk]) {
			continue
		}
		for _, k := range w.keys() {
			s.enqueueKey(w, k, now)
		}
	}
}

// enqueueKey queues the object key of w.
func (s *Source) enqueueKey(w *resourceWatch, key clustercache.Key, observed time.Time) {
	k := queueKey{w: w, namespace: key.Namespace, name: key.Name}
	s.mu.Lock()
	if _, ok := s.pending[k]; !ok {
		s.pending[k] = observed
	}
	s.metrics.QueueDepth.Set(float64(len(s.pending)))
	s.mu.Unlock()
	s.queue.Add(k)
}

// processNext evaluates one queued object; it returns false once the queue
// shuts down.
func (s *Source) processNext() bool {
	k, shutdown := s.queue.Get()
	if shutdown {
		return false
	}
	s.mu.Lock()
	observed, ok := s.pending[k]
	delete(s.pending, k)
	if !ok {
		observed = s.clock.Now()
	}
	s.inflight++
	s.metrics.QueueDepth.Set(float64(len(s.pending)))
	s.mu.Unlock()

	defer func() {
		s.queue.Done(k)
		s.mu.Lock()
		s.inflight--
		idle := len(s.pending) == 0 && s.inflight == 0
		s.mu.Unlock()
		if idle {
			select {
			case s.idle <- struct{}{}:
			default:
			}
		}
	}()
	if err := s.evaluate(k, observed); err != nil {
		s.log.Error("audit evaluation failed", "resource", k.w.resourceLabel(), "namespace", k.namespace, "name", k.name, "error", err)
	}
	s.queue.Forget(k)
	return true
}

// evaluate runs the audit rules on the cached object of k and records its
// findings; an object gone from the cache has none.
func (s *Source) evaluate(k queueKey, observed time.Time) error {
	k.w.evaluating.RLock()
	defer k.w.evaluating.RUnlock()
	if k.w.stopped.Load() {
		return nil
	}
	cached, exists := k.w.handle.Object(k.namespace, k.name)
	if !exists {
		s.store.Delete(k.w.objectKey(k.namespace, k.name), observed)
		if s.gone != nil {
			s.gone(k.w.gvk, k.namespace, k.name)
		}
		return nil
	}
	obj, err := cached.Decode()
	if err != nil {
		return err
	}
	timeout := s.evalTimeout
	if timeout <= 0 {
		timeout = DefaultEvalTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	results, err := s.eng.Evaluate(ctx, obj, engine.Options{Mode: core.ModeAudit})
	cancel()
	s.metrics.Evaluations.Inc()
	if err != nil {
		return err
	}
	now := s.clock.Now()
	var findings []core.Finding
	var counted *core.Rule
	for _, r := range results {
		// A skip is a rule an exception kept from being evaluated.
		if s.counter != nil && r.Rule != counted && r.Outcome != core.OutcomeSkip {
			s.counter.Evaluated(r.Rule)
			counted = r.Rule
		}
		switch r.Outcome {
		case core.OutcomeError:
			s.metrics.RuleErrors.WithLabelValues(r.Rule.MetricLabel()).Inc()
		case core.OutcomePass:
			continue
		}
		findings = append(findings, core.Finding{Result: r, FirstSeen: now})
	}
	ref := core.ResourceRef{APIVersion: k.w.gvk.GroupVersion().String(), Kind: k.w.gvk.Kind,
		Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: string(obj.GetUID())}
	s.store.Set(ref, findings, observed)
	return nil
}
