package eval

import "sync"

// inOrder merges evaluated batches in the order they were read, in the
// worker that hands over the batch that is next, while its results are
// still in that core's cache. A merging goroutine of its own sat in the
// run queue of a busy worker's core until that worker blocked, so the
// merges came in bursts and the read-ahead filled meanwhile
// (BenchmarkJobsCeiling: two jobs went from a median 0.89 of what two
// one-job runs side by side do on the same cores to 0.94).
//
// At most ahead batches are numbered and not yet merged, and the reader
// holds one more while admit waits for a merge: that bounds the batches
// (and their buffers) in memory whatever the input.
type inOrder struct {
	merge func(*batch)
	// slots holds a token for each batch admitted and not yet merged.
	slots chan struct{}
	// read numbers the batches as admit sees them; only the reader
	// touches it.
	read int

	mu sync.Mutex
	// ring holds the evaluated batches that wait for an earlier one, at
	// their number modulo its length, ahead. No two unmerged batches share
	// a place because a batch's slot is given back only after its merge
	// (done), so the numbers not merged span at most ahead.
	ring []*batch
	// next is the number of the batch to merge next.
	next int
	// merging: a worker is merging, and takes whatever becomes ready.
	merging bool
	// out is the merging worker's list of the batches it took.
	out []*batch
}

func newInOrder(ahead int, merge func(*batch)) *inOrder {
	return &inOrder{merge: merge, slots: make(chan struct{}, ahead), ring: make([]*batch, ahead)}
}

// admit numbers b, once fewer than ahead batches are unmerged.
func (o *inOrder) admit(b *batch) {
	o.slots <- struct{}{}
	b.seq = o.read
	o.read++
}

// done hands over b, evaluated. If b is next and no other worker is
// merging, the caller merges b and every batch after it that is ready,
// including those handed over meanwhile; else b waits for that.
func (o *inOrder) done(b *batch) {
	o.mu.Lock()
	o.ring[b.seq%len(o.ring)] = b
	if o.merging {
		o.mu.Unlock()
		return
	}
	o.merging = true
	for {
		out := o.out[:0]
		for {
			i := o.next % len(o.ring)
			r := o.ring[i]
			if r == nil {
				break
			}
			o.ring[i] = nil
			out = append(out, r)
			o.next++
		}
		if len(out) == 0 {
			o.merging = false
			o.mu.Unlock()
			return
		}
		// Merged outside the lock (a merge may write to a file), so other
		// workers hand over their batches meanwhile without waiting.
		o.mu.Unlock()
		for i, r := range out {
			o.merge(r)
			out[i] = nil
			<-o.slots // after the merge: see ring
		}
		o.mu.Lock()
		o.out = out
	}
}
