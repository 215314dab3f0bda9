// Package network is Portal's NetworkPolicy analyser (layer 6): it reasons
// about the declared NetworkPolicy graph (which policies select which pods,
// which peers their rules can reach) and raises findings on the
// NetworkPolicies and Namespaces whose declarations do not protect what they
// appear to: a namespace without a default-deny policy, an ipBlock open to
// the internet, a selector that matches nothing, egress that blocks DNS.
//
// It reads Pods, NetworkPolicies and Namespaces from the shared cluster cache
// (internal/clustercache) and is driven by their events: an event marks the
// namespaces it can change (its own, and the namespaces whose policies select
// peers by namespace labels) for analysis, a bounded pool of workers analyses
// each marked namespace once however many events marked it, and findings go
// to the findings pipeline (internal/findings) under the producer name
// "network". A change in one namespace never re-analyses the whole cluster;
// a periodic resync (default 10 min) is only the safety net.
//
// The checks run on a world interface, so `portal eval --network` (Analyse)
// runs the same code on manifests.
package network

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/findings"
)

// ProducerName is the analyser's name in the findings pipeline: reports
// show its results with source "portal-network", alerts with the label
// producer="network".
const ProducerName = "network"

// Defaults of Options.
const (
	DefaultWorkers      = 2
	DefaultResyncPeriod = 10 * time.Minute
	DefaultSyncTimeout  = 2 * time.Minute
)

// Options configure the analyser.
type Options struct {
	Config Config
	// Cache is the shared cluster cache the Pod, NetworkPolicy and
	// Namespace informers come from. Required.
	Cache *clustercache.Cache
	// Findings is the pipeline the analyser publishes into. Required.
	Findings *findings.Pipeline
	// Workers bounds concurrent namespace analyses. Default DefaultWorkers.
	Workers int
	// ResyncPeriod re-analyses every namespace this often, a safety net
	// behind the events. Default DefaultResyncPeriod; negative disables it.
	ResyncPeriod time.Duration
	// SyncTimeout bounds the wait for the informers' initial lists.
	// Default DefaultSyncTimeout.
	SyncTimeout time.Duration
	Logger      *slog.Logger
	// Registerer receives the metrics. Default: controller-runtime's
	// metrics.Registry.
	Registerer prometheus.Registerer
	// Clock is the analyser's time: when a finding was first seen, when an
	// event was observed, when the resync ticks. Default: the real clock;
	// tests step a fake one instead of waiting.
	Clock clock.WithTicker
}

// Adder is the part of a controller-runtime manager Setup needs.
type Adder interface {
	Add(manager.Runnable) error
}

// Analyser is the running NetworkPolicy analyser.
type Analyser struct {
	o        Options
	cfg      Config
	log      *slog.Logger
	metrics  *Metrics
	producer *findings.Producer
	synced   chan struct{}
	queue    workqueue.TypedInterface[string]
	// depthMu orders the queue-depth gauge's updates: reading the length
	// and setting the gauge race with a worker's Get otherwise, and a
	// stale non-zero depth would stay on an idle queue.
	depthMu sync.Mutex
	// ready is set once the initial lists are in: events before it only
	// update the state, which the first full analysis reads.
	ready atomic.Bool

	pods, namespaces, policies *clustercache.Handle

	mu sync.Mutex
	// byNS holds the parsed policies of each namespace; cross holds, per
	// namespace, its policies' peers selected by namespace labels, whose
	// findings change with other namespaces' pods and labels.
	byNS  map[string]map[string]*Policy
	cross map[string][]crossPeer
	// observed is when the first event that queued a namespace was seen.
	observed map[string]time.Time
	// published are the objects of each namespace with open findings,
	// and counts their findings by check, for the gauge.
	published map[string]map[core.ObjectKey]core.ResourceRef
	counts    map[string]map[string]int
}

// Setup registers the analyser as the producer "network" of o.Findings and
// adds it to mgr.
func Setup(mgr Adder, o Options) (*Analyser, error) {
	if o.Cache == nil || o.Findings == nil {
		return nil, errors.New("network: a cluster cache and a findings pipeline are required")
	}
	if err := o.Config.Validate(); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.ResyncPeriod == 0 {
		o.ResyncPeriod = DefaultResyncPeriod
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	a := &Analyser{
		o: o, cfg: o.Config, log: o.Logger.With("layer", "network"),
		metrics: NewMetrics(o.Registerer), synced: make(chan struct{}),
		byNS: map[string]map[string]*Policy{}, cross: map[string][]crossPeer{},
		observed: map[string]time.Time{}, published: map[string]map[core.ObjectKey]core.ResourceRef{},
		counts: map[string]map[string]int{},
	}
	var err error
	if a.producer, err = o.Findings.Register(ProducerName, findings.ProducerOptions{Synced: a.synced}); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if err := mgr.Add(a); err != nil {
		return nil, err
	}
	return a, nil
}

// Metrics returns the analyser's metrics.
func (a *Analyser) Metrics() *Metrics { return a.metrics }

// Synced is closed once the first analysis of every namespace is published.
func (a *Analyser) Synced() <-chan struct{} { return a.synced }

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica analyses, so a new leader's sinks publish a complete state at once.
func (a *Analyser) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (a *Analyser) Start(ctx context.Context) error {
	a.queue = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "portal-network"})
	defer a.queue.ShutDown()
	var subs []*clustercache.Subscription
	for _, w := range []struct {
		h  **clustercache.Handle
		s  clustercache.Scope
		fn clustercache.Handler
	}{
		{&a.namespaces, clustercache.Scope{Resource: NamespacesResource}, a.onNamespace},
		{&a.policies, clustercache.Scope{Resource: NetworkPoliciesResource}, a.onPolicy},
		{&a.pods, clustercache.Scope{Resource: PodsResource}, a.onPod},
	} {
		h, err := a.o.Cache.Acquire(w.s)
		if err != nil {
			return fmt.Errorf("network: watch %s: %w", w.s, err)
		}
		defer h.Release()
		*w.h = h
		sub, err := h.Subscribe(w.fn, clustercache.SubscribeOptions{})
		if err != nil {
			return fmt.Errorf("network: %w", err)
		}
		subs = append(subs, sub)
	}
	for _, s := range subs {
		if !s.WaitSynced(ctx, a.o.SyncTimeout) {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("network: informers not synced within %s", a.o.SyncTimeout)
		}
	}
	start := a.o.Clock.Now()
	a.ready.Store(true)
	all := a.allNamespaces()
	for _, ns := range all {
		a.analyse(ns)
	}
	close(a.synced)
	a.log.Info("network analysis synced", "namespaces", len(all), "duration", a.o.Clock.Since(start).String())
	var wg sync.WaitGroup
	for range a.o.Workers {
		wg.Go(func() {
			for a.next() {
			}
		})
	}
	if a.o.ResyncPeriod > 0 {
		wg.Go(func() { a.resync(ctx) })
	}
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	return nil
}

func (a *Analyser) resync(ctx context.Context) {
	t := a.o.Clock.NewTicker(a.o.ResyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			a.enqueue(time.Time{}, a.allNamespaces()...)
		}
	}
}

// allNamespaces lists every namespace that exists or holds a policy.
func (a *Analyser) allNamespaces() []string {
	set := map[string]struct{}{}
	a.namespaces.Each("", func(o *clustercache.Object) bool {
		set[o.Name] = struct{}{}
		return true
	})
	a.mu.Lock()
	for ns := range a.byNS {
		set[ns] = struct{}{}
	}
	a.mu.Unlock()
	return slices.Sorted(maps.Keys(set))
}

// enqueue marks namespaces for analysis; observed is when the event that
// marked them was seen (zero: a resync).
func (a *Analyser) enqueue(observed time.Time, namespaces ...string) {
	if !a.ready.Load() {
		return
	}
	a.mu.Lock()
	for _, ns := range namespaces {
		if _, ok := a.observed[ns]; !ok && !observed.IsZero() {
			a.observed[ns] = observed
		}
	}
	a.mu.Unlock()
	for _, ns := range namespaces {
		a.queue.Add(ns)
	}
	a.setDepth()
}

// dependents lists the namespaces other than ns whose cross-namespace
// peers a change can touch: touched reports it for one peer.
func (a *Analyser) dependents(ns string, touched func(crossPeer) bool) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for dep, peers := range a.cross {
		if dep != ns && slices.ContainsFunc(peers, touched) {
			out = append(out, dep)
		}
	}
	return out
}

func (a *Analyser) onPolicy(e clustercache.Event) {
	if e.Relist || e.Resync {
		return
	}
	now := a.o.Clock.Now()
	ns, name := e.Key.Namespace, e.Key.Name
	var p *Policy
	if e.Type != clustercache.Deleted && e.New != nil {
		u, err := e.New.Decode()
		if err != nil {
			a.log.Error("network: decode NetworkPolicy", "namespace", ns, "name", name, "error", err)
			return
		}
		if p, err = parsePolicy(u); err != nil {
			a.log.Error("network: read NetworkPolicy", "namespace", ns, "name", name, "error", err)
			return
		}
	}
	a.mu.Lock()
	if p == nil {
		delete(a.byNS[ns], name)
		if len(a.byNS[ns]) == 0 {
			delete(a.byNS, ns)
		}
	} else {
		if a.byNS[ns] == nil {
			a.byNS[ns] = map[string]*Policy{}
		}
		a.byNS[ns][name] = p
	}
	var peers []crossPeer
	for _, q := range a.byNS[ns] {
		peers = append(peers, q.crossPeers()...)
	}
	if len(peers) == 0 {
		delete(a.cross, ns)
	} else {
		a.cross[ns] = peers
	}
	a.mu.Unlock()
	a.enqueue(now, ns)
}

// onPod queues the pod's namespace and the namespaces whose peers the pod's
// old or new labels can match.
func (a *Analyser) onPod(e clustercache.Event) {
	if e.Relist || e.Resync {
		return
	}
	if e.Type == clustercache.Updated && e.Old != nil && e.New != nil && e.Old.SameLabels(e.New) {
		// Status and spec updates change no selector's match.
		return
	}
	now := a.o.Clock.Now()
	ns := e.Key.Namespace
	var nsLabels labels.Labels
	if o, ok := a.namespaces.Object("", ns); ok {
		nsLabels = o.Labels()
	}
	var old, cur labels.Labels
	if e.Old != nil {
		old = e.Old.Labels()
	}
	if e.New != nil {
		cur = e.New.Labels()
	}
	deps := a.dependents(ns, func(c crossPeer) bool {
		return (old != nil && c.touchedBy(nsLabels, old)) || (cur != nil && c.touchedBy(nsLabels, cur)) || (old == nil && cur == nil && c.touchedBy(nsLabels, nil))
	})
	a.enqueue(now, append(deps, ns)...)
}

// onNamespace queues the namespace and those whose namespace selectors its
// old or new labels match.
func (a *Analyser) onNamespace(e clustercache.Event) {
	if e.Relist || e.Resync {
		return
	}
	if e.Type == clustercache.Updated && e.Old != nil && e.New != nil && e.Old.SameLabels(e.New) {
		return
	}
	now := a.o.Clock.Now()
	var old, cur labels.Labels
	if e.Old != nil {
		old = e.Old.Labels()
	}
	if e.New != nil {
		cur = e.New.Labels()
	}
	deps := a.dependents(e.Key.Name, func(c crossPeer) bool {
		return c.touchedBy(old, nil) || c.touchedBy(cur, nil)
	})
	a.enqueue(now, append(deps, e.Key.Name)...)
}

// setDepth publishes the queue's length. Every queue change is followed by
// a call, and the last call to take the lock reads the length after every
// change before it, so the gauge ends at the true depth.
func (a *Analyser) setDepth() {
	a.depthMu.Lock()
	defer a.depthMu.Unlock()
	a.metrics.Queued.Set(float64(a.queue.Len()))
}

// next analyses one queued namespace; false once the queue shut down.
func (a *Analyser) next() bool {
	ns, shutdown := a.queue.Get()
	if shutdown {
		return false
	}
	defer func() {
		// Done re-queues a namespace an event marked while it was
		// analysed: the depth changes here too.
		a.queue.Done(ns)
		a.setDepth()
	}()
	a.setDepth()
	a.analyse(ns)
	return true
}

// analyse runs the checks on one namespace and publishes what changed. The
// queue never hands one namespace to two workers at once.
func (a *Analyser) analyse(ns string) {
	start := a.o.Clock.Now()
	a.mu.Lock()
	observed := a.observed[ns]
	delete(a.observed, ns)
	pols := slices.Collect(maps.Values(a.byNS[ns]))
	a.mu.Unlock()
	sortPolicies(pols)
	res := analyseNamespace(&a.cfg, (*liveWorld)(a), ns, pols, start)
	a.metrics.Analyses.Inc()
	a.metrics.Duration.Observe(a.o.Clock.Since(start).Seconds())
	if res.truncated {
		a.metrics.Truncated.Inc()
		a.log.Warn("network analysis truncated: selectors left unchecked", "namespace", ns, "visits", res.visits, "maxPodVisits", a.cfg.MaxPodVisits)
	}
	a.publish(ns, res.objects, observed)
}

// publish hands the namespace's findings to the pipeline in one batch, with
// empty findings for the objects that had some and are gone (a deleted
// policy).
func (a *Analyser) publish(ns string, objs []core.ObjectFindings, observed time.Time) {
	a.mu.Lock()
	before := a.published[ns]
	a.mu.Unlock()
	next := map[core.ObjectKey]core.ResourceRef{}
	listed := make(map[core.ObjectKey]struct{}, len(objs))
	counts := map[string]int{}
	batch := core.FindingBatch{Objects: make([]core.ObjectFindings, 0, len(objs))}
	for _, of := range objs {
		of.Observed = observed
		key := of.Object.Key()
		listed[key] = struct{}{}
		if len(of.Findings) > 0 {
			next[key] = of.Object
			for _, f := range of.Findings {
				counts[f.RuleName()]++
			}
		} else if _, had := before[key]; !had {
			continue
		}
		batch.Objects = append(batch.Objects, of)
	}
	for key, ref := range before {
		if _, ok := listed[key]; !ok {
			batch.Objects = append(batch.Objects, core.ObjectFindings{Object: ref, Observed: observed})
		}
	}
	if len(batch.Objects) > 0 {
		a.producer.Publish(batch)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(next) == 0 {
		delete(a.published, ns)
	} else {
		a.published[ns] = next
	}
	for check, n := range a.counts[ns] {
		a.metrics.Findings.WithLabelValues(check).Sub(float64(n))
	}
	for check, n := range counts {
		a.metrics.Findings.WithLabelValues(check).Add(float64(n))
	}
	if len(counts) == 0 {
		delete(a.counts, ns)
	} else {
		a.counts[ns] = counts
	}
}

// liveWorld reads the cluster cache.
type liveWorld Analyser

func (w *liveWorld) namespaceLabels(name string) (labels.Labels, bool) {
	o, ok := w.namespaces.Object("", name)
	if !ok {
		return nil, false
	}
	return o.Labels(), true
}

func (w *liveWorld) eachNamespace(fn func(string, labels.Labels) bool) {
	w.namespaces.EachLabels("", func(o *clustercache.Object, l labels.Labels) bool { return fn(o.Name, l) })
}

func (w *liveWorld) eachPod(ns string, fn func(labels.Labels) bool) {
	w.pods.EachLabels(ns, func(_ *clustercache.Object, l labels.Labels) bool { return fn(l) })
}
