package audit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
)

// watchKey names one informer: a resource in one namespace, or in all
// namespaces when namespace is empty.
type watchKey struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// scope is the scope label of the informer's metrics.
func (k watchKey) scope() string {
	if k.namespace == "" {
		return scopeCluster
	}
	return scopeNamespace
}

// resourceWatch is audit's hold on one informer of the cluster cache: a
// resource (group, version, resource) in all namespaces or in one, acquired
// when an audit rule first needs it and released when the last one goes.
// Other layers may share the informer; audit's subscription is its own.
type resourceWatch struct {
	gvr        schema.GroupVersionResource
	gvk        schema.GroupVersionKind
	namespaced bool
	// namespace limits the informer to one namespace; empty: all.
	namespace string
	handle    *clustercache.Handle
	sub       *clustercache.Subscription
	stopped   atomic.Bool
	// evaluating is held (shared) by each evaluation of one of w's
	// objects, so stop can wait for them before dropping findings.
	evaluating sync.RWMutex
}

// resourceLabel names the resource in metrics: "pods", "deployments.apps".
func (w *resourceWatch) resourceLabel() string {
	return w.gvr.GroupResource().String()
}

// objectKey is the output key of the object named by a queue key.
func (w *resourceWatch) objectKey(namespace, name string) core.ObjectKey {
	return core.ObjectKey{APIVersion: w.gvk.GroupVersion().String(), Kind: w.gvk.Kind, Namespace: namespace, Name: name}
}

// startWatch acquires the cluster cache's informer of one resource and
// subscribes to it; its events go to s's queue.
func (s *Source) startWatch(key watchKey, gvk schema.GroupVersionKind, namespaced bool) (*resourceWatch, error) {
	w := &resourceWatch{gvr: key.gvr, gvk: gvk, namespaced: namespaced, namespace: key.namespace}
	h, err := s.cache.Acquire(clustercache.Scope{Resource: key.gvr, Namespace: key.namespace})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", key.gvr, err)
	}
	// Before subscribing: an informer another layer already synced hands
	// the subscription its objects at once, and a worker may evaluate one
	// (reading w.handle) before Subscribe has returned.
	w.handle = h
	sub, err := h.Subscribe(func(e clustercache.Event) {
		switch {
		case e.Type == clustercache.Added:
			s.metrics.Events.WithLabelValues("add").Inc()
		case e.Type == clustercache.Deleted:
			s.metrics.Events.WithLabelValues("delete").Inc()
		case e.Resync:
			s.metrics.Resyncs.Inc()
		case e.Relist:
			// A relist after a broken watch: unchanged, but evaluated
			// again all the same.
			s.metrics.Events.WithLabelValues("relist").Inc()
		default:
			s.metrics.Events.WithLabelValues("update").Inc()
		}
		s.enqueueKey(w, e.Key, s.clock.Now())
	}, clustercache.SubscribeOptions{ResyncPeriod: s.resync})
	if err != nil {
		h.Release()
		return nil, err
	}
	w.sub = sub
	return w, nil
}

// stop releases the informer (the cache stops it unless another layer holds
// it) and waits for the evaluations of its objects under way; queued keys
// of w are dropped.
func (w *resourceWatch) stop() {
	w.stopped.Store(true)
	w.handle.Release()
	w.evaluating.Lock()
	defer w.evaluating.Unlock()
}

// waitSynced blocks until the informer has delivered its initial list to
// audit's subscription, ctx ends, or timeout passes; it reports whether it
// synced.
func (w *resourceWatch) waitSynced(ctx context.Context, timeout time.Duration) bool {
	return w.sub.WaitSynced(ctx, timeout)
}

// keys lists the keys of every object in the informer's store.
func (w *resourceWatch) keys() []clustercache.Key { return w.handle.Keys() }

// watchSet is the set of running informers, by resource and namespace.
type watchSet struct {
	mu sync.Mutex
	m  map[watchKey]*resourceWatch
}

func (ws *watchSet) list() []*resourceWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	out := make([]*resourceWatch, 0, len(ws.m))
	for _, w := range ws.m {
		out = append(out, w)
	}
	return out
}
