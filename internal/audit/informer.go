package audit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

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

// resourceWatch is one informer on one resource (group, version, resource),
// in all namespaces or in one, started when an audit rule first needs it and
// stopped when the last one goes.
type resourceWatch struct {
	gvr        schema.GroupVersionResource
	gvk        schema.GroupVersionKind
	namespaced bool
	// namespace limits the informer to one namespace; empty: all.
	namespace string
	informer  cache.SharedIndexInformer
	reg       cache.ResourceEventHandlerRegistration
	cancel    context.CancelFunc
	done      chan struct{}
	stopped   atomic.Bool
	// evaluating is held (shared) by each evaluation of one of w's
	// objects, so stop can wait for them before dropping findings.
	evaluating sync.RWMutex
	// watches counts the watch requests the informer opened.
	watches atomic.Int64
}

// resourceLabel names the resource in metrics: "pods", "deployments.apps".
func (w *resourceWatch) resourceLabel() string {
	return w.gvr.GroupResource().String()
}

// objectKey is the output key of the object named by a queue key.
func (w *resourceWatch) objectKey(namespace, name string) core.ObjectKey {
	return core.ObjectKey{APIVersion: w.gvk.GroupVersion().String(), Kind: w.gvk.Kind, Namespace: namespace, Name: name}
}

// startWatch creates and runs the informer of one resource. Its events go to
// s's queue; its re-opened watches count as reconnects once it has synced.
func (s *Source) startWatch(ctx context.Context, key watchKey, gvk schema.GroupVersionKind, namespaced bool) (*resourceWatch, error) {
	gvr := key.gvr
	w := &resourceWatch{gvr: gvr, gvk: gvk, namespaced: namespaced, namespace: key.namespace, done: make(chan struct{})}
	var res dynamic.ResourceInterface = s.dynamic.Resource(gvr)
	if key.namespace != "" {
		res = s.dynamic.Resource(gvr).Namespace(key.namespace)
	}
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if w.watches.Add(1) > 1 && w.informer.HasSynced() {
				s.metrics.WatchReconnects.WithLabelValues(w.resourceLabel()).Inc()
				s.log.Debug("audit watch reconnecting", "resource", w.resourceLabel())
			}
			return res.Watch(ctx, o)
		},
	}, s.dynamic)
	// The example object is the type the dynamic client decodes events
	// into, which the reflector checks; the cache holds what the transform
	// makes of them.
	w.informer = cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{
		ResyncPeriod:      s.resync,
		ObjectDescription: key.description(),
	})
	// The cache holds each object as compact JSON rather than nested maps,
	// a fraction of the memory; evaluate decodes it again.
	if err := w.informer.SetTransform(compactTransform(s.log, w.resourceLabel())); err != nil {
		return nil, fmt.Errorf("watch %s: %w", gvr, err)
	}
	if err := w.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		s.log.Warn("audit watch failed; retrying", "resource", w.resourceLabel(), "error", err)
	}); err != nil {
		return nil, fmt.Errorf("watch %s: %w", gvr, err)
	}
	reg, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			s.metrics.Events.WithLabelValues("add").Inc()
			s.enqueue(w, obj)
		},
		UpdateFunc: func(oldObj, newObj any) {
			switch {
			case oldObj == newObj:
				// The periodic resync hands the cached object itself.
				s.metrics.Resyncs.Inc()
			case sameVersion(oldObj, newObj):
				// A relist after a broken watch: unchanged, but
				// evaluated again all the same.
				s.metrics.Events.WithLabelValues("relist").Inc()
			default:
				s.metrics.Events.WithLabelValues("update").Inc()
			}
			s.enqueue(w, newObj)
		},
		DeleteFunc: func(obj any) {
			s.metrics.Events.WithLabelValues("delete").Inc()
			s.enqueue(w, obj)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", gvr, err)
	}
	w.reg = reg
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	go func() {
		defer close(w.done)
		w.informer.RunWithContext(wctx)
	}()
	return w, nil
}

// stop ends the informer and waits for it and for the evaluations of its
// objects under way; queued keys of w are dropped.
func (w *resourceWatch) stop() {
	w.stopped.Store(true)
	w.cancel()
	<-w.done
	w.evaluating.Lock()
	defer w.evaluating.Unlock()
}

// waitSynced blocks until the informer has delivered its initial list to the
// handler, ctx ends, or timeout passes; it reports whether it synced.
func (w *resourceWatch) waitSynced(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cache.WaitForCacheSync(ctx.Done(), w.reg.HasSynced)
}

// keys lists the namespace/name keys of every object in the informer cache.
func (w *resourceWatch) keys() []string { return w.informer.GetStore().ListKeys() }

func sameVersion(a, b any) bool {
	am, aok := a.(metav1.Object)
	bm, bok := b.(metav1.Object)
	return aok && bok && am.GetResourceVersion() == bm.GetResourceVersion()
}

// description names the informer in client-go's logs.
func (k watchKey) description() string {
	if k.namespace == "" {
		return k.gvr.String()
	}
	return k.gvr.String() + " in namespace " + k.namespace
}

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
