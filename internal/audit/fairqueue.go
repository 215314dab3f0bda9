package audit

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// fairQueue is the item store under the audit's client-go work queue: one
// FIFO per namespace, popped round-robin across the namespaces that have
// items. With the workqueue's own single FIFO, a namespace that creates
// 10,000 objects put another namespace's one change behind all of them;
// here that change waits for at most one item of each other namespace.
// Cluster-scoped objects (namespace "") are one more namespace.
//
// It implements workqueue.Queue: the workqueue keeps the rest of its
// contract (a queued key is held once, a key added while it is processed
// is queued again only after Done, rate-limited re-adds, shutdown) and
// calls these methods under its own lock, so they need none.
type fairQueue[T comparable] struct {
	namespace func(T) string
	queues    map[string][]T
	// turns are the namespaces with queued items, in the order they are
	// served; each appears once.
	turns []string
	n     int
	// namespaces, when set, follows len(queues).
	namespaces prometheus.Gauge
}

var _ workqueue.Queue[queueKey] = (*fairQueue[queueKey])(nil)

func newFairQueue[T comparable](namespace func(T) string, namespaces prometheus.Gauge) *fairQueue[T] {
	return &fairQueue[T]{namespace: namespace, queues: map[string][]T{}, namespaces: namespaces}
}

// newFairWorkqueue is client-go's rate-limiting work queue over a
// fairQueue, named name for the workqueue metrics.
func newFairWorkqueue[T comparable](name string, namespace func(T) string, namespaces prometheus.Gauge) workqueue.TypedRateLimitingInterface[T] {
	base := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[T]{Name: name, Queue: newFairQueue(namespace, namespaces)})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[T]{Name: name, Queue: base})
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[T](),
		workqueue.TypedRateLimitingQueueConfig[T]{Name: name, DelayingQueue: delaying})
}

// Push queues item at the end of its namespace's FIFO; a namespace that had
// none joins the end of the round.
func (q *fairQueue[T]) Push(item T) {
	ns := q.namespace(item)
	items, ok := q.queues[ns]
	if !ok {
		q.turns = append(q.turns, ns)
	}
	q.queues[ns] = append(items, item)
	q.n++
	q.setGauge()
}

// Pop takes the first item of the namespace whose turn it is; that
// namespace goes to the end of the round if it has more. The workqueue
// calls it only when Len is not 0.
func (q *fairQueue[T]) Pop() T {
	ns := q.turns[0]
	q.turns[0] = ""
	q.turns = q.turns[1:]
	items := q.queues[ns]
	item := items[0]
	var zero T
	items[0] = zero // no reference kept in the backing array
	if len(items) == 1 {
		delete(q.queues, ns)
	} else {
		q.queues[ns] = items[1:]
		q.turns = append(q.turns, ns)
	}
	q.n--
	q.setGauge()
	return item
}

// Touch keeps a queued item where it is, as the workqueue's default queue
// does.
func (q *fairQueue[T]) Touch(T) {}

// Len is the number of queued items, all namespaces together.
func (q *fairQueue[T]) Len() int { return q.n }

func (q *fairQueue[T]) setGauge() {
	if q.namespaces != nil {
		q.namespaces.Set(float64(len(q.queues)))
	}
}
