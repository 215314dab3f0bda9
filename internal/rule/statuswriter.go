package rule

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// statusWriter is the skeleton the rule status writers (counts, budget,
// lookups) share. What a tenant's rule does on every evaluation must not
// become an API server write per evaluation, so every writer queues rule
// objects rather than writes, takes a token from one bucket per write, and
// schedules each rule at most once per interval on one clock. What a write
// says is each writer's own.
type statusWriter struct {
	clock   clock.WithTicker
	limiter *rate.Limiter
	queue   workqueue.TypedDelayingInterface[countKey]
	log     *slog.Logger
}

// writerOptions are what the writers' options have in common, defaulted.
type writerOptions struct {
	name  string
	qps   float64
	burst int
	clock clock.WithTicker
	log   *slog.Logger
}

func newStatusWriter(o writerOptions) statusWriter {
	if o.qps <= 0 {
		o.qps = DefaultCountQPS
	}
	if o.burst <= 0 {
		o.burst = DefaultCountBurst
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	return statusWriter{
		clock:   o.clock,
		limiter: rate.NewLimiter(rate.Limit(o.qps), o.burst),
		queue: workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[countKey]{
			Name: o.name, Clock: o.clock,
		}),
		log: o.log,
	}
}

// run hands each queued rule to write, one at a time and each after a
// token, until ctx ends.
func (w *statusWriter) run(ctx context.Context, write func(context.Context, countKey)) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	for {
		k, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		if w.limiter.Wait(ctx) == nil {
			write(ctx, k)
		}
		w.queue.Done(k)
	}
}

// due queues k for when interval has passed since last (now if it has).
func (w *statusWriter) due(k countKey, last time.Time, interval time.Duration) {
	w.queue.AddAfter(k, max(0, interval-w.clock.Since(last)))
}

// condition is one status condition as server-side apply takes it; the
// message is cut at 1 KiB, since it may quote what a tenant wrote.
func (w *statusWriter) condition(typ string, ok bool, reason, msg string, gen int64) map[string]any {
	status := "False"
	if ok {
		status = "True"
	}
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	return map[string]any{
		"type": typ, "status": status, "reason": reason, "message": msg, "observedGeneration": gen,
		"lastTransitionTime": w.clock.Now().UTC().Format(time.RFC3339),
	}
}

// apply server-side applies status to rule object k as field manager owner.
func (w *statusWriter) apply(ctx context.Context, c client.Client, k countKey, owner string, status map[string]any) error {
	patch, err := json.Marshal(map[string]any{
		"apiVersion": policyv1alpha1.GroupVersion.String(),
		"kind":       k.kind,
		"metadata":   map[string]any{"name": k.name, "namespace": k.namespace},
		"status":     status,
	})
	if err != nil {
		return fmt.Errorf("encode status of %s %s/%s: %w", k.kind, k.namespace, k.name, err)
	}
	obj := newRuleObject(k.kind)
	obj.SetNamespace(k.namespace)
	obj.SetName(k.name)
	return c.Status().Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, patch),
		client.FieldOwner(owner), client.ForceOwnership)
}

// activeGeneration is the generation of rule object k the engine runs, 0
// when l does not know it.
func activeGeneration(l *CRLoader, k countKey) int64 {
	if l == nil {
		return 0
	}
	if ls, ok := l.State(k.kind, k.namespace, k.name); ok {
		return ls.ActiveGeneration
	}
	return 0
}
