// Package clustercache is Portal's shared cluster cache: one compact
// informer per resource (and namespace) that any layer asks for, started when
// the first consumer acquires it and stopped when the last one releases it.
//
// Objects are held deflated against a per-resource dictionary (see Object),
// a fraction of the heap of the unstructured maps a plain informer keeps, so
// a tenant who creates many objects costs Portal little. Consumers read
// through listers (Get by namespace and name, List by namespace and label
// selector) that never call the API server, and subscribe to add, update and
// delete events; each subscriber has its own queue, so a slow one delays
// nobody else.
//
// Wiring: one Cache per manager, added to it as a runnable (it runs on every
// replica), and handed to the layers:
//
//	c, err := clustercache.New(cfg, mgr.GetRESTMapper(), clustercache.Options{Logger: log})
//	mgr.Add(c)
//	h, err := c.Acquire(clustercache.Scope{Resource: podsGVR})
//	defer h.Release()
//	sub, err := h.Subscribe(func(e clustercache.Event) { ... }, clustercache.SubscribeOptions{})
//	err = h.WaitSynced(ctx, time.Minute)
//	pods, err := h.List("team-a", selector)
package clustercache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Errors of the cache; test them with errors.Is.
var (
	// ErrNotWatched: a read named a resource (or namespace) no consumer
	// has acquired. Reads never fall through to the API server.
	ErrNotWatched = errors.New("not watched by the cluster cache")
	// ErrNotSynced: the resource's informer has not delivered its initial
	// list yet, so a read would miss objects.
	ErrNotSynced = errors.New("not synced yet")
	// ErrStopped: the cache's manager has stopped.
	ErrStopped = errors.New("cluster cache stopped")
)

// DefaultResyncPeriod is how often the informers check whether a
// subscriber's resync is due; a subscriber's own resync period is rounded
// up to it.
const DefaultResyncPeriod = time.Minute

// Scope names one informer: a resource in every namespace (Namespace empty)
// or in one. A consumer that needs only some namespaces acquires each of
// them, so a tenant's rule never makes Portal list and cache every
// namespace's objects.
type Scope struct {
	Resource  schema.GroupVersionResource
	Namespace string
}

func (s Scope) String() string {
	if s.Namespace == "" {
		return s.Resource.String()
	}
	return s.Resource.String() + " in namespace " + s.Namespace
}

// resourceLabel names the resource in metrics and logs: "pods",
// "deployments.apps".
func (s Scope) resourceLabel() string { return s.Resource.GroupResource().String() }

// scopeLabel is the scope label of the metrics.
func (s Scope) scopeLabel() string {
	if s.Namespace == "" {
		return "cluster"
	}
	return "namespace"
}

// Key names one object.
type Key struct {
	Namespace string
	Name      string
}

func (k Key) String() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// Resource is a resource the API server serves.
type Resource struct {
	GVR        schema.GroupVersionResource
	GVK        schema.GroupVersionKind
	Namespaced bool
}

// Options configure a Cache. The zero value is usable.
type Options struct {
	// ResyncPeriod is how often informers check whether a subscriber's
	// periodic resync is due. Default DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the cache's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Cache is the shared cluster cache. It implements controller-runtime's
// manager.Runnable: informers acquired before the manager starts begin
// listing when it does, and all stop with it.
type Cache struct {
	dynamic dynamic.Interface
	mapper  meta.RESTMapper
	log     *slog.Logger
	metrics *Metrics
	resync  time.Duration

	mu sync.Mutex
	// ctx is the manager's context once Start runs; informers acquired
	// before wait for it.
	ctx       context.Context
	stopped   bool
	informers map[Scope]*informer
}

// New returns a cache that lists and watches with cfg and resolves resources
// with mapper.
func New(cfg *rest.Config, mapper meta.RESTMapper, o Options) (*Cache, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster cache: dynamic client: %w", err)
	}
	return NewForClient(dyn, mapper, o), nil
}

// NewForClient is New with a dynamic client of the caller's.
func NewForClient(dyn dynamic.Interface, mapper meta.RESTMapper, o Options) *Cache {
	if o.ResyncPeriod <= 0 {
		o.ResyncPeriod = DefaultResyncPeriod
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c := &Cache{
		dynamic: dyn, mapper: mapper, log: o.Logger.With("component", "cluster-cache"),
		resync: o.ResyncPeriod, informers: map[Scope]*informer{},
	}
	c.metrics = NewMetrics(o.Registerer)
	return c
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica caches, so a new leader reads a warm cache.
func (c *Cache) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable: it starts the informers acquired so far
// and those acquired later, and stops them all when ctx ends.
func (c *Cache) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.ctx != nil || c.stopped {
		c.mu.Unlock()
		return errors.New("cluster cache started twice")
	}
	c.ctx = ctx
	for _, inf := range c.informers {
		inf.run(ctx)
	}
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.stopped = true
	infs := make([]*informer, 0, len(c.informers))
	for s, inf := range c.informers {
		infs = append(infs, inf)
		delete(c.informers, s)
	}
	c.metrics.setInformersLocked(c.informers)
	c.mu.Unlock()
	for _, inf := range infs {
		inf.stop()
	}
	return nil
}

// Resolve maps a resource as rules name it to the resource the API server
// serves: a plural name ("pods"), qualified by group when two groups serve
// the same name ("deployments.apps", "ingresses.networking.k8s.io"), or by
// version and group ("deployments.v1.apps").
func (c *Cache) Resolve(resource string) (Resource, error) {
	return resolve(c.mapper, resource)
}

// ResolveKind maps a kind, with its version or without, to its resource.
func (c *Cache) ResolveKind(gvk schema.GroupVersionKind) (Resource, error) {
	var versions []string
	if gvk.Version != "" {
		versions = []string{gvk.Version}
	}
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), versions...)
	if err != nil {
		return Resource{}, fmt.Errorf("kind %s: %w", gvk, err)
	}
	return Resource{GVR: m.Resource, GVK: m.GroupVersionKind, Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}, nil
}

// resource resolves a full GroupVersionResource.
func (c *Cache) resource(gvr schema.GroupVersionResource) (Resource, error) {
	gvk, err := c.mapper.KindFor(gvr)
	if err != nil {
		return Resource{}, fmt.Errorf("resource %s: %w", gvr, err)
	}
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return Resource{}, fmt.Errorf("resource %s: %w", gvr, err)
	}
	return Resource{GVR: gvr, GVK: gvk, Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}, nil
}

// Acquire returns a handle on the informer of s, starting it when no one
// else holds it. Call Release when done: the informer stops with its last
// handle. Acquire does not wait for the informer to list (see
// Handle.WaitSynced), so a resource the cache may not list (RBAC) or that is
// slow delays no one else.
func (c *Cache) Acquire(s Scope) (*Handle, error) {
	res, err := c.resource(s.Resource)
	if err != nil {
		return nil, err
	}
	if s.Namespace != "" && !res.Namespaced {
		return nil, fmt.Errorf("%s is cluster-scoped: it cannot be watched in namespace %s", s.Resource.GroupResource(), s.Namespace)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, ErrStopped
	}
	inf := c.informers[s]
	if inf == nil {
		inf, err = c.newInformer(s, res)
		if err != nil {
			return nil, err
		}
		c.informers[s] = inf
		if c.ctx != nil {
			inf.run(c.ctx)
		}
		c.log.Info("cluster cache watching", "resource", s.Resource.String(), "namespace", s.Namespace)
	}
	inf.refs++
	c.metrics.setInformersLocked(c.informers)
	return &Handle{c: c, inf: inf}, nil
}

// release drops one reference to inf and stops it when it was the last.
func (c *Cache) release(inf *informer) {
	c.mu.Lock()
	inf.refs--
	last := inf.refs == 0
	if last && c.informers[inf.scope] == inf {
		delete(c.informers, inf.scope)
	}
	c.metrics.setInformersLocked(c.informers)
	c.mu.Unlock()
	if last {
		inf.stop()
		c.log.Info("cluster cache stopped watching", "resource", inf.scope.Resource.String(), "namespace", inf.scope.Namespace)
	}
}

// Scopes lists the running informers.
func (c *Cache) Scopes() []Scope {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Scope, 0, len(c.informers))
	for s := range c.informers {
		out = append(out, s)
	}
	sortScopes(out)
	return out
}

// covering returns the informer whose objects include namespace's objects of
// gvr: the cluster-wide one, else the one of that namespace.
func (c *Cache) covering(gvr schema.GroupVersionResource, namespace string) (*informer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if inf := c.informers[Scope{Resource: gvr}]; inf != nil {
		return inf, nil
	}
	if namespace != "" {
		if inf := c.informers[Scope{Resource: gvr, Namespace: namespace}]; inf != nil {
			return inf, nil
		}
		return nil, fmt.Errorf("%s in namespace %s: %w", gvr.GroupResource(), namespace, ErrNotWatched)
	}
	return nil, fmt.Errorf("%s in all namespaces: %w", gvr.GroupResource(), ErrNotWatched)
}
