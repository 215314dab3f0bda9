package admission

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
)

// slotsUnderTest records the order in which waiters got their slot.
type slotsUnderTest struct {
	*slots
	mu      sync.Mutex
	granted []string
	held    map[string]func()
}

func newSlotsUnderTest(capacity, maxWaiting int) *slotsUnderTest {
	return &slotsUnderTest{slots: newSlots(capacity, maxWaiting, NewMetrics(nil)), held: map[string]func(){}}
}

// wait queues a request named name of namespace ns and returns the channel
// its error arrives on; it returns once the request waits (or failed).
func (s *slotsUnderTest) wait(t *testing.T, ctx context.Context, ns, name string) <-chan error {
	t.Helper()
	before := testutil.ToFloat64(s.metrics.Waiting)
	errs := make(chan error, 1)
	go func() {
		release, err := s.acquire(ctx, ns)
		if err == nil {
			s.mu.Lock()
			s.granted = append(s.granted, name)
			s.held[name] = release
			s.mu.Unlock()
		}
		errs <- err
	}()
	poll(t, name+" waiting or answered", func() bool {
		return testutil.ToFloat64(s.metrics.Waiting) > before || len(errs) > 0
	})
	return errs
}

func (s *slotsUnderTest) release(t *testing.T, name string) {
	t.Helper()
	s.mu.Lock()
	r := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if r == nil {
		t.Fatalf("%s holds no slot", name)
	}
	r()
}

func (s *slotsUnderTest) holding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

func (s *slotsUnderTest) order() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.granted...)
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestSlotsRoundRobinAcrossNamespaces: with every slot taken, a namespace
// that queued three requests first and one that queued one after them are
// served alternately, each namespace in its own order, and never more than
// the capacity at once.
func TestSlotsRoundRobinAcrossNamespaces(t *testing.T) {
	s := newSlotsUnderTest(1, 10)
	ctx := context.Background()
	if err := <-s.wait(t, ctx, "a", "a0"); err != nil {
		t.Fatal(err)
	}
	var errs []<-chan error
	for _, w := range []struct{ ns, name string }{{"a", "a1"}, {"a", "a2"}, {"a", "a3"}, {"b", "b1"}, {clusterScoped, "c1"}} {
		errs = append(errs, s.wait(t, ctx, w.ns, w.name))
	}
	if got := testutil.ToFloat64(s.metrics.Waiting); got != 5 {
		t.Fatalf("waiting = %v, want 5", got)
	}
	for _, name := range []string{"a0", "a1", "b1", "c1", "a2"} {
		s.release(t, name)
		poll(t, "the next grant after "+name, func() bool { return s.holding() == 1 })
		if got := testutil.ToFloat64(s.metrics.InFlight); got != 1 {
			t.Fatalf("in flight = %v, want 1", got)
		}
	}
	s.release(t, "a3")
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"a0", "a1", "b1", "c1", "a2", "a3"}
	if got := s.order(); !slices.Equal(got, want) {
		t.Fatalf("grant order %v, want %v", got, want)
	}
	if got := testutil.ToFloat64(s.metrics.InFlight); got != 0 {
		t.Fatalf("in flight = %v after every release, want 0", got)
	}
}

// TestSlotsNamespaceQueueIsBounded: a namespace with the most requests
// waiting gets the next one refused at once; another namespace still
// queues.
func TestSlotsNamespaceQueueIsBounded(t *testing.T) {
	s := newSlotsUnderTest(1, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := <-s.wait(t, ctx, "a", "a0"); err != nil {
		t.Fatal(err)
	}
	s.wait(t, ctx, "a", "a1")
	s.wait(t, ctx, "a", "a2")
	if err := <-s.wait(t, ctx, "a", "a3"); !errors.Is(err, errNamespaceQueueFull) {
		t.Fatalf("a3: %v, want %v", err, errNamespaceQueueFull)
	}
	s.wait(t, ctx, "b", "b1")
	if got := testutil.ToFloat64(s.metrics.Throttled.WithLabelValues(ThrottledQueueFull)); got != 1 {
		t.Fatalf("throttled{queue_full} = %v, want 1", got)
	}
	s.release(t, "a0")
	poll(t, "a1 granted", func() bool { return len(s.order()) == 2 })
	if got := s.order()[1]; got != "a1" {
		t.Fatalf("granted %s, want a1", got)
	}
}

// TestSlotsDeadline: a request whose context ends while it waits gets the
// deadline error and leaves the queue, and the slot goes to the next
// waiter.
func TestSlotsDeadline(t *testing.T) {
	s := newSlotsUnderTest(1, 10)
	bg := context.Background()
	if err := <-s.wait(t, bg, "a", "a0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	late := s.wait(t, ctx, "a", "late")
	next := s.wait(t, bg, "b", "next")
	cancel()
	if err := <-late; !errors.Is(err, errNoSlotBeforeDeadline) {
		t.Fatalf("late: %v, want %v", err, errNoSlotBeforeDeadline)
	}
	if got := testutil.ToFloat64(s.metrics.Waiting); got != 1 {
		t.Fatalf("waiting = %v, want 1", got)
	}
	s.release(t, "a0")
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	s.release(t, "next")
	if got := testutil.ToFloat64(s.metrics.InFlight); got != 0 {
		t.Fatalf("in flight = %v, want 0", got)
	}
	if got := testutil.ToFloat64(s.metrics.Throttled.WithLabelValues(ThrottledDeadline)); got != 1 {
		t.Fatalf("throttled{deadline} = %v, want 1", got)
	}
}
