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
		p := newProgress(fileState{fileID: fileID{Inode: 1}}, 64, func(st fileState) { saved = append(saved, st) })
		// Event i's line ends at 10*(i+1); a line that is no event (a
		// blank or undecodable one) now and then between them.
		n := 1 + rng.IntN(30)
		var seqs []uint64
		off := int64(0)
		start := map[uint64]int64{}
		for range n {
			if rng.IntN(4) == 0 {
				off += 3
				p.reached(fileState{fileID: fileID{Inode: 1}, Offset: off})
			}
			seq, err := p.next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			start[seq] = off
			off += 10
			p.reached(fileState{fileID: fileID{Inode: 1}, Offset: off})
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
	p := newProgress(fileState{fileID: fileID{Inode: 1}}, 2, func(st fileState) { saved = st })
	a, _ := p.next(context.Background())
	p.reached(fileState{fileID: fileID{Inode: 1}, Offset: 10})
	b, _ := p.next(context.Background())
	p.unqueue(b)
	p.evaluated(a)
	p.stop()
	if saved.Offset != 10 {
		t.Fatalf("recorded %+v, want offset 10", saved)
	}
}

// TestProgressBoundsWhatWaits: with one event's evaluation stuck, reading
// waits once maxPending events wait for it, however many of the later ones
// are evaluated: what is held (positions, events evaluated early) and what
// a restart would read again stay bounded.
func TestProgressBoundsWhatWaits(t *testing.T) {
	const maxPending = 4
	p := newProgress(fileState{fileID: fileID{Inode: 1}}, maxPending, func(fileState) {})
	blocked := func() bool {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		// A slot free is taken at once (select picks among ready cases at
		// random, so try a few times before calling it blocked).
		for range 20 {
			if seq, err := p.next(ctx); err == nil {
				p.unqueue(seq)
				return false
			}
		}
		return true
	}
	stuck, err := p.next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	p.reached(fileState{fileID: fileID{Inode: 1}, Offset: 10})
	for i := range 1000 {
		if blocked() {
			if i != maxPending-1 {
				t.Fatalf("reading waited after %d events behind the stuck one, want %d", i, maxPending-1)
			}
			break
		}
		seq, _ := p.next(t.Context())
		p.reached(fileState{fileID: fileID{Inode: 1}, Offset: int64(10 * (i + 2))})
		p.evaluated(seq)
		if i == 999 {
			t.Fatal("reading never waited for the stuck event")
		}
	}
	if len(p.marks) > maxPending+1 || len(p.early) > maxPending {
		t.Fatalf("%d positions and %d early evaluations held, want at most %d", len(p.marks), len(p.early), maxPending)
	}
	p.evaluated(stuck)
	if blocked() {
		t.Fatal("reading still waits once the stuck event is evaluated")
	}
	if p.at.Offset != 10*maxPending {
		t.Fatalf("at %+v once every event is evaluated, want offset %d", p.at, 10*maxPending)
	}
}

// TestProgressTruncatedStartsAgain: a log truncated in place is recorded
// at its start at once, though events of the old content are pending, so a
// restart does not resume at an old offset inside the new content.
func TestProgressTruncatedStartsAgain(t *testing.T) {
	var saved fileState
	p := newProgress(fileState{fileID: fileID{Inode: 1}}, 8, func(st fileState) { saved = st })
	seq, _ := p.next(t.Context())
	p.reached(fileState{fileID: fileID{Inode: 1}, Offset: 5000})
	p.reset(fileState{fileID: fileID{Inode: 1}})
	p.next(t.Context())
	p.reached(fileState{fileID: fileID{Inode: 1}, Offset: 10})
	p.evaluated(seq)
	p.record()
	if saved.Offset != 0 {
		t.Fatalf("recorded %+v after the truncation, want offset 0 until the new content is evaluated", saved)
	}
	p.evaluated(seq + 1)
	p.record()
	if saved.Offset != 10 {
		t.Fatalf("recorded %+v, want offset 10", saved)
	}
}

// TestProgressSavesSparinglyAfterTheStop: the workers can go on through a
// full queue after the input stopped; the state is then saved every
// stoppedSaveEvery evaluations and at the last event read, not once per
// event (each a write and a rename, under the lock the workers share).
func TestProgressSavesSparinglyAfterTheStop(t *testing.T) {
	const n = 1000
	var saves []fileState
	p := newProgress(fileState{fileID: fileID{Inode: 1}}, n, func(st fileState) { saves = append(saves, st) })
	for i := range n {
		if _, err := p.next(t.Context()); err != nil {
			t.Fatal(err)
		}
		p.reached(fileState{fileID: fileID{Inode: 1}, Offset: int64(10 * (i + 1))})
	}
	p.stop()
	for seq := range uint64(n) {
		p.evaluated(seq + 1)
	}
	if len(saves) > n/stoppedSaveEvery+1 {
		t.Errorf("%d saves for %d evaluations after the stop, want at most %d", len(saves), n, n/stoppedSaveEvery+1)
	}
	if last := saves[len(saves)-1]; last.Offset != 10*n {
		t.Errorf("last save %+v, want offset %d", last, 10*n)
	}
}
