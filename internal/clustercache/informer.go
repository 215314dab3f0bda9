package clustercache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// informer is one compact informer: a resource in all namespaces or in one.
type informer struct {
	scope    Scope
	resource Resource
	inf      cache.SharedIndexInformer
	// refs counts the handles on it; guarded by Cache.mu.
	refs int
	// running, cancel and done are guarded by Cache.mu until stop.
	running bool
	cancel  context.CancelFunc
	done    chan struct{}
	// watches counts the watch requests the informer opened.
	watches atomic.Int64
	// objects and bytes are what the informer adds to the size gauges,
	// taken back when it stops.
	objects, bytes atomic.Int64
	sizes          struct{ objects, bytes prometheus.Gauge }

	errMu sync.Mutex
	// lastErr is the last list or watch failure, kept until the informer
	// syncs, so a consumer waiting for it can say why it does not.
	lastErr error
}

// newInformer creates the informer of s, not yet running.
func (c *Cache) newInformer(s Scope, res Resource) (*informer, error) {
	inf := &informer{scope: s, resource: res, done: make(chan struct{})}
	var ri dynamic.ResourceInterface = c.dynamic.Resource(s.Resource)
	if s.Namespace != "" {
		ri = c.dynamic.Resource(s.Resource).Namespace(s.Namespace)
	}
	label := s.resourceLabel()
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			c.metrics.watches.WithLabelValues(label).Inc()
			if inf.watches.Add(1) > 1 && inf.inf.HasSynced() {
				c.metrics.reconnects.WithLabelValues(label).Inc()
				c.log.Debug("cluster cache watch reconnecting", "resource", label)
			}
			return ri.Watch(ctx, o)
		},
	}, c.dynamic)
	// The example object is the type the dynamic client decodes events
	// into, which the reflector checks; the store holds what the transform
	// makes of them.
	inf.inf = cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{
		ResyncPeriod:      c.resync,
		ObjectDescription: s.String(),
		Indexers:          cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	})
	if err := inf.inf.SetTransform(compactTransform(c.log, label)); err != nil {
		return nil, fmt.Errorf("watch %s: %w", s, err)
	}
	if err := inf.inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		inf.errMu.Lock()
		inf.lastErr = err
		inf.errMu.Unlock()
		c.metrics.watchErrors.WithLabelValues(label, errorReason(err)).Inc()
		if apierrors.IsForbidden(err) {
			c.log.Error("cluster cache may not list or watch this resource; grant Portal's service account list and watch on it", "resource", label, "namespace", s.Namespace, "error", err)
			return
		}
		c.log.Warn("cluster cache watch failed; retrying", "resource", label, "namespace", s.Namespace, "error", err)
	}); err != nil {
		return nil, fmt.Errorf("watch %s: %w", s, err)
	}
	inf.sizes.objects = c.metrics.objects.WithLabelValues(label)
	inf.sizes.bytes = c.metrics.bytes.WithLabelValues(label)
	if _, err := inf.inf.AddEventHandlerWithOptions(handlerFuncs(inf.count), cache.HandlerOptions{ResyncPeriod: new(time.Duration)}); err != nil {
		return nil, fmt.Errorf("watch %s: %w", s, err)
	}
	return inf, nil
}

// count keeps the size gauges: the informer's own subscriber, so the cache
// pays a few atomic adds per event and nothing per scrape.
func (inf *informer) count(e Event) {
	var objects, bytes int64
	switch e.Type {
	case Added:
		objects, bytes = 1, int64(e.New.Size())
	case Updated:
		bytes = int64(e.New.Size() - e.Old.Size())
	case Deleted:
		objects = -1
		if e.Old != nil {
			bytes = -int64(e.Old.Size())
		}
	}
	inf.objects.Add(objects)
	inf.bytes.Add(bytes)
	inf.sizes.objects.Add(float64(objects))
	inf.sizes.bytes.Add(float64(bytes))
}

// errorReason is the reason label of portal_cluster_cache_watch_errors_total.
func errorReason(err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsNotFound(err):
		return "not_found"
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return "expired"
	default:
		return "other"
	}
}

// run starts the informer; the caller holds Cache.mu.
func (inf *informer) run(ctx context.Context) {
	if inf.running {
		return
	}
	ctx, inf.cancel = context.WithCancel(ctx)
	inf.running = true
	go func() {
		defer close(inf.done)
		inf.inf.RunWithContext(ctx)
	}()
}

// stop ends the informer and waits for it. The caller has removed it from
// the cache, so no one starts it again.
func (inf *informer) stop() {
	if inf.cancel == nil {
		// Never started (the cache was not): nothing runs.
		return
	}
	inf.cancel()
	<-inf.done
	// The informer has stopped its subscribers: count runs no more.
	inf.sizes.objects.Sub(float64(inf.objects.Load()))
	inf.sizes.bytes.Sub(float64(inf.bytes.Load()))
}

// err is why the informer has not synced, if it knows.
func (inf *informer) err() error {
	if inf.inf.HasSynced() {
		return nil
	}
	inf.errMu.Lock()
	defer inf.errMu.Unlock()
	return inf.lastErr
}
