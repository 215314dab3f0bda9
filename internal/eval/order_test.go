package eval

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestInOrderMergesInReadOrder: whatever order workers finish batches in,
// inOrder merges them in the order admit numbered them, one merge at a
// time, and never lets more than ahead batches be read and not merged.
func TestInOrderMergesInReadOrder(t *testing.T) {
	for _, c := range []struct{ batches, workers, ahead int }{
		{1, 1, 1}, {100, 1, 4}, {1000, 2, 8}, {1000, 8, 32}, {1000, 8, 3}, {5000, 16, 64},
	} {
		var (
			merged   []int
			inMerge  atomic.Int32
			unmerged atomic.Int32
			most     atomic.Int32
		)
		o := newInOrder(c.ahead, func(b *batch) {
			if inMerge.Add(1) != 1 {
				t.Error("two merges at once")
			}
			merged = append(merged, b.seq)
			unmerged.Add(-1)
			inMerge.Add(-1)
		})
		work := make(chan *batch, c.workers)
		go func() {
			defer close(work)
			for range c.batches {
				b := &batch{}
				o.admit(b)
				n := unmerged.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				work <- b
			}
		}()
		var wg sync.WaitGroup
		for w := range c.workers {
			r := rand.New(rand.NewPCG(uint64(w), uint64(c.batches)))
			wg.Go(func() {
				for b := range work {
					// Workers finish out of order: some batches take longer.
					for range r.IntN(4) {
						runtime.Gosched()
					}
					o.done(b)
				}
			})
		}
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(time.Minute):
			t.Fatalf("%+v: the workers did not finish within a minute: %d batches merged", c, len(merged))
		}
		if len(merged) != c.batches {
			t.Fatalf("%+v: merged %d batches, want %d", c, len(merged), c.batches)
		}
		for i, s := range merged {
			if s != i {
				t.Fatalf("%+v: merge %d was batch %d", c, i, s)
			}
		}
		if m := int(most.Load()); m > c.ahead {
			t.Errorf("%+v: %d batches read and not merged at once, want at most %d", c, m, c.ahead)
		}
	}
}

// TestInOrderHoldsWhatIsNotNext: batches handed over in any order within
// the read-ahead are merged in read order, each as soon as every earlier
// one is: the order is the test's, not the scheduler's.
func TestInOrderHoldsWhatIsNotNext(t *testing.T) {
	const ahead, rounds = 8, 50
	r := rand.New(rand.NewPCG(1, 2))
	var merged []int
	o := newInOrder(ahead, func(b *batch) { merged = append(merged, b.seq) })
	handed := make([]bool, ahead*rounds+1)
	for range rounds {
		chunk := make([]*batch, ahead)
		for i := range chunk {
			chunk[i] = &batch{}
			o.admit(chunk[i])
		}
		r.Shuffle(len(chunk), func(i, j int) { chunk[i], chunk[j] = chunk[j], chunk[i] })
		for _, b := range chunk {
			o.done(b)
			handed[b.seq] = true
			ready := 0
			for handed[ready] {
				ready++
			}
			if len(merged) != ready {
				t.Fatalf("after handing over batch %d: merged %v, want the first %d", b.seq, merged, ready)
			}
		}
	}
	for i, s := range merged {
		if s != i {
			t.Fatalf("merge %d was batch %d", i, s)
		}
	}
}
