package admission

import (
	"container/list"
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
)

// Defaults of Options.MaxConcurrentEvaluations and
// Options.MaxWaitingPerNamespace.
const (
	// DefaultEvaluationsPerCPU times GOMAXPROCS is the default bound on
	// concurrent evaluations: rule evaluation is CPU-bound, so more at once
	// only makes every one of them slower, and each may use its whole
	// evaluation budget.
	DefaultEvaluationsPerCPU = 2
	// DefaultMaxWaitingPerNamespace bounds the requests of one namespace
	// waiting for an evaluation slot: each holds its decoded objects.
	DefaultMaxWaitingPerNamespace = 64
)

// clusterScoped is the fairness key of cluster-scoped objects: no
// namespace is named "", so they share a queue of their own.
const clusterScoped = ""

// Why a request got no evaluation slot: the values of the reason label of
// portal_admission_throttled_total.
const (
	ThrottledDeadline  = "deadline"   // its deadline passed while it waited
	ThrottledQueueFull = "queue_full" // its namespace already had the most requests waiting
)

var (
	errNoSlotBeforeDeadline = errors.New("no evaluation slot became free before the request's deadline")
	errNamespaceQueueFull   = errors.New("too many requests of the same namespace are already waiting for an evaluation slot")
)

// slots bounds the concurrent rule evaluations of the webhook and shares
// them fairly across namespaces. Every evaluation may use a full budget, so
// without a bound a flood of requests multiplies the CPU and memory Portal
// uses; and with a plain semaphore, one namespace's flood would queue ahead
// of every other namespace's requests and, at admission, fail their writes.
// Instead, waiting requests queue per namespace (FIFO), and a freed slot
// goes to the first waiter of the next namespace in a round-robin over the
// namespaces that have waiters, as API Priority and Fairness does with its
// fair queuing, simplified: one namespace's flood delays another
// namespace's request by at most one evaluation per namespace waiting.
type slots struct {
	capacity   int
	maxWaiting int
	metrics    *Metrics

	mu    sync.Mutex
	inUse int
	// ring holds the *nsQueue of each namespace with waiters, in the order
	// they are served.
	ring   list.List
	queues map[string]*nsQueue
}

// nsQueue is one namespace's waiters.
type nsQueue struct {
	ns      string
	waiters list.List // of *waiter
	elem    *list.Element
}

type waiter struct {
	// granted is closed when a slot is handed to the waiter.
	granted chan struct{}
	elem    *list.Element
}

func newSlots(capacity, maxWaiting int, m *Metrics) *slots {
	if capacity <= 0 {
		capacity = DefaultEvaluationsPerCPU * runtime.GOMAXPROCS(0)
	}
	if maxWaiting <= 0 {
		maxWaiting = DefaultMaxWaitingPerNamespace
	}
	m.EvaluationSlots.Set(float64(capacity))
	return &slots{capacity: capacity, maxWaiting: maxWaiting, metrics: m, queues: map[string]*nsQueue{}}
}

// acquire waits for an evaluation slot for a request of namespace ns until
// ctx ends, and returns the function that gives it back. The request's
// deadline is the only time that matters here: a request waits as long as
// it may and no longer. It fails at once when ns already has maxWaiting
// requests waiting.
func (s *slots) acquire(ctx context.Context, ns string) (release func(), err error) {
	s.mu.Lock()
	if s.inUse < s.capacity && s.ring.Len() == 0 {
		s.inUse++
		s.metrics.InFlight.Set(float64(s.inUse))
		s.mu.Unlock()
		return s.release, nil
	}
	q := s.queues[ns]
	if q != nil && q.waiters.Len() >= s.maxWaiting {
		s.mu.Unlock()
		s.metrics.Throttled.WithLabelValues(ThrottledQueueFull).Inc()
		return nil, errNamespaceQueueFull
	}
	if q == nil {
		q = &nsQueue{ns: ns}
		q.elem = s.ring.PushBack(q)
		s.queues[ns] = q
	}
	w := &waiter{granted: make(chan struct{})}
	w.elem = q.waiters.PushBack(w)
	s.metrics.Waiting.Inc()
	s.mu.Unlock()

	start := time.Now()
	select {
	case <-w.granted:
		s.metrics.SlotWait.Observe(time.Since(start).Seconds())
		return s.release, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-w.granted:
		// Handed a slot as the deadline passed: too late to use it, so
		// it goes to the next waiter.
		s.mu.Unlock()
		s.release()
	default:
		s.dequeueLocked(q, w)
		s.mu.Unlock()
	}
	s.metrics.Throttled.WithLabelValues(ThrottledDeadline).Inc()
	return nil, errNoSlotBeforeDeadline
}

// release gives a slot back: straight to the first waiter of the namespace
// whose turn it is, which then goes to the back of the round.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	front := s.ring.Front()
	if front == nil {
		s.inUse--
		s.metrics.InFlight.Set(float64(s.inUse))
		return
	}
	q := front.Value.(*nsQueue)
	w := q.waiters.Front().Value.(*waiter)
	s.dequeueLocked(q, w)
	if q.waiters.Len() > 0 {
		s.ring.MoveToBack(q.elem)
	}
	close(w.granted)
}

// dequeueLocked removes w from q, and q from the round once it is empty.
func (s *slots) dequeueLocked(q *nsQueue, w *waiter) {
	q.waiters.Remove(w.elem)
	s.metrics.Waiting.Dec()
	if q.waiters.Len() == 0 {
		s.ring.Remove(q.elem)
		delete(s.queues, q.ns)
	}
}
