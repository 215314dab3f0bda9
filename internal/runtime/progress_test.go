package runtime

import (
	"context"
	"math/rand/v2"
	"testing"
)

// TestProgressRecordsOnlyWhatIsEvaluatedInOrder: events finish in any
// order; the recorded position never passes an event not yet evaluated,
// reaches the end once all are, and evaluations after the input stopped
// record their own progress.
func TestProgressRecordsOnlyWhatIsEvaluatedInOrder(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var saved []fileState
		p := newProgress(fileState{Inode: 1}, 64, func(st fileState) { saved = append(saved, st) })
		// Event i's line ends at 10*(i+1); a line that is no event (a
		// blank or undecodable one) now and then between them.
		n := 1 + rng.IntN(30)
		var seqs []uint64
		off := int64(0)
		start := map[uint64]int64{}
		for range n {
			if rng.IntN(4) == 0 {
				off += 3
				p.reached(fileState{Inode: 1, Offset: off})
			}
			seq, err := p.next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			start[seq] = off
			off += 10
			p.reached(fileState{Inode: 1, Offset: off})
			seqs = append(seqs, seq)
		}
		rng.Shuffle(len(seqs), func(i, j int) { seqs[i], seqs[j] = seqs[j], seqs[i] })
		stopAt := rng.IntN(len(seqs) + 1)
		evaluated := map[uint64]bool{}
		for i, seq := range seqs {
			if i == stopAt {
				p.stop()
			}
			p.evaluated(seq)
			evaluated[seq] = true
			if i%3 == 0 && i < stopAt {
				p.record()
			}
			if len(saved) == 0 {
				continue
			}
			last := saved[len(saved)-1]
			for s, begin := range start {
				if !evaluated[s] && last.Offset > begin {
					t.Fatalf("seed %d: recorded offset %d passes event %d (from %d), not evaluated", seed, last.Offset, s, begin)
				}
			}
		}
		if stopAt == len(seqs) {
			p.stop()
		}
		if len(saved) == 0 || saved[len(saved)-1].Offset != off {
			t.Fatalf("seed %d: all %d events evaluated, recorded %v, want offset %d", seed, n, saved, off)
		}
	}
}

// TestProgressUnqueued: an event that was numbered but not queued (the
// input stopping while it waited for room) holds nothing back.
func TestProgressUnqueued(t *testing.T) {
	var saved fileState
	p := newProgress(fileState{Inode: 1}, 2, func(st fileState) { saved = st })
	a, _ := p.next(context.Background())
	p.reached(fileState{Inode: 1, Offset: 10})
	b, _ := p.next(context.Background())
	p.unqueue(b)
	p.evaluated(a)
	p.stop()
	if saved.Offset != 10 {
		t.Fatalf("recorded %+v, want offset 10", saved)
	}
}

// TestProgressBoundsWhatWaits: reading waits once maxPending events wait
// for their evaluation, and goes on when one is evaluated: one slow
// evaluation holds back a bounded number of positions, not the whole log.
func TestProgressBoundsWhatWaits(t *testing.T) {
	p := newProgress(fileState{Inode: 1}, 3, func(fileState) {})
	for i := range 3 {
		if _, err := p.next(t.Context()); err != nil {
			t.Fatal(err)
		}
		p.reached(fileState{Inode: 1, Offset: int64(10 * (i + 1))})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.next(ctx); err == nil {
		t.Fatal("a fourth event was numbered while three wait for their evaluation")
	}
	p.evaluated(2) // out of order: the first still holds the position back
	if _, err := p.next(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := len(p.marks); got > 4 {
		t.Fatalf("%d positions held for 4 events", got)
	}
}
