package engine

import (
	"bytes"
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// caCheckInterval is how often the controller compares the cache's CA with
// the one it last saw; a change re-applies every Engine, so the CA copies
// in their namespaces (the waf-proxy's ConfigMap, the istio-wasm driver's
// DestinationRule Secret) follow a rotation within it rather than within
// ResyncInterval. The comparison is in memory.
const caCheckInterval = 5 * time.Second

// caChanges is a source that fires once whenever CABundle() returns
// something new, after the first value seen.
func (r *Reconciler) caChanges() source.Source {
	ch := make(chan event.GenericEvent, 1)
	src := source.Channel(ch, handler.Funcs{GenericFunc: func(ctx context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		var list wafv1alpha1.EngineList
		if err := r.client.List(ctx, &list); err != nil {
			r.opts.Logger.Error("list Engines after a cache CA change", "error", err)
			return
		}
		for i := range list.Items {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}})
	return &caWatch{Source: src, ch: ch, ca: r.opts.CABundle, interval: caCheckInterval}
}

// caWatch runs the ticker beside the channel source it feeds.
type caWatch struct {
	source.Source
	ch       chan event.GenericEvent
	ca       func() []byte
	interval time.Duration
}

// Start starts the channel source and the comparison loop.
func (w *caWatch) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if err := w.Source.Start(ctx, q); err != nil {
		return err
	}
	go func() {
		last := bytes.Clone(w.ca())
		t := time.NewTicker(w.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur := w.ca()
			if len(cur) == 0 || bytes.Equal(cur, last) {
				continue
			}
			last = bytes.Clone(cur)
			select {
			case w.ch <- event.GenericEvent{}:
			default: // one pending signal is enough: reconciles read the newest CA
			}
		}
	}()
	return nil
}
