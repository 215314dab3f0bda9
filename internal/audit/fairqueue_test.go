package audit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
)

// item is "namespace/name"; "/name" is cluster-scoped.
func itemNamespace(item string) string { ns, _, _ := strings.Cut(item, "/"); return ns }

func newTestWorkqueue() (workqueue.TypedRateLimitingInterface[string], prometheus.Gauge) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "namespaces"})
	return newFairWorkqueue("", itemNamespace, g), g
}

// TestFairQueueRoundRobin: namespaces take turns, each in its own order,
// and one that empties leaves the round.
func TestFairQueueRoundRobin(t *testing.T) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "namespaces"})
	q := newFairQueue(itemNamespace, g)
	for _, it := range []string{"a/1", "a/2", "a/3", "a/4", "b/1", "/node", "b/2"} {
		q.Push(it)
	}
	if q.Len() != 7 || testutil.ToFloat64(g) != 3 {
		t.Fatalf("len %d, namespaces %v; want 7 and 3", q.Len(), testutil.ToFloat64(g))
	}
	var got []string
	for q.Len() > 0 {
		got = append(got, q.Pop())
	}
	want := []string{"a/1", "b/1", "/node", "a/2", "b/2", "a/3", "a/4"}
	if !slices.Equal(got, want) {
		t.Fatalf("popped %v, want %v", got, want)
	}
	if testutil.ToFloat64(g) != 0 || len(q.turns) != 0 || len(q.queues) != 0 {
		t.Fatalf("empty queue keeps %v namespaces, turns %v", testutil.ToFloat64(g), q.turns)
	}
}

// TestFairWorkqueueServesAQuietNamespaceFirst: behind 1,000 queued keys of
// one namespace, another namespace's key is the second one handed out.
func TestFairWorkqueueServesAQuietNamespaceFirst(t *testing.T) {
	q, g := newTestWorkqueue()
	defer q.ShutDown()
	for i := range 1000 {
		q.Add(fmt.Sprintf("a/%d", i))
	}
	q.Add("b/1")
	if got := testutil.ToFloat64(g); got != 2 {
		t.Fatalf("namespaces = %v, want 2", got)
	}
	for _, want := range []string{"a/0", "b/1", "a/1"} {
		if got, _ := q.Get(); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
		q.Done(want)
	}
}

// TestFairWorkqueueContract: the workqueue semantics audit relies on hold
// over the fair queue: a queued key is held once; a key added while it is
// processed is not handed to a second worker, and is queued again after
// Done; AddRateLimited re-adds with the rate limiter's delay and counts
// requeues until Forget; after ShutDown, adds are dropped and Get reports
// shutdown once the queue is drained.
func TestFairWorkqueueContract(t *testing.T) {
	q, _ := newTestWorkqueue()
	q.Add("a/x")
	q.Add("a/x")
	q.Add("b/y")
	if q.Len() != 2 {
		t.Fatalf("len %d after adding a/x twice and b/y, want 2", q.Len())
	}
	x, _ := q.Get()
	if x != "a/x" {
		t.Fatalf("got %s, want a/x", x)
	}
	q.Add("a/x") // changed while being processed
	if y, _ := q.Get(); y != "b/y" {
		t.Fatalf("got %s while a/x is processed, want b/y", y)
	}
	if q.Len() != 0 {
		t.Fatalf("a/x queued again while processed: len %d", q.Len())
	}
	q.Done("a/x")
	if q.Len() != 1 {
		t.Fatalf("a/x not queued again after Done: len %d", q.Len())
	}
	if again, _ := q.Get(); again != "a/x" {
		t.Fatalf("got %s, want a/x again", again)
	}
	q.Done("a/x")
	q.Done("b/y")

	q.AddRateLimited("c/z")
	if n := q.NumRequeues("c/z"); n != 1 {
		t.Fatalf("requeues %d, want 1", n)
	}
	got := make(chan string, 1)
	go func() { k, _ := q.Get(); got <- k }()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return len(got) == 1, nil })
	if err != nil || <-got != "c/z" {
		t.Fatalf("the rate-limited key did not come back: %v", err)
	}
	q.Forget("c/z")
	q.Done("c/z")
	if n := q.NumRequeues("c/z"); n != 0 {
		t.Fatalf("requeues %d after Forget, want 0", n)
	}

	q.Add("d/1")
	q.ShutDown()
	q.Add("d/2")
	if k, shutdown := q.Get(); k != "d/1" || shutdown {
		t.Fatalf("got %q, shutdown %v; want d/1 drained first", k, shutdown)
	}
	q.Done("d/1")
	if _, shutdown := q.Get(); !shutdown {
		t.Fatal("Get after ShutDown and drain did not report shutdown")
	}
}
