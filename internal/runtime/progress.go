package runtime

import (
	"context"
	"sync"
)

// progress is how far the audit log has been evaluated, which is what its
// state file records: the read position after the last event that was
// evaluated with every event before it. Reading runs ahead of evaluation
// by up to a queue of events; recording the read position instead lost
// those queued and not evaluated when Portal stopped, the next start
// resuming after them. Events are evaluated by several workers, so they
// finish out of order: one evaluated after an earlier one that was not is
// read again after a restart, and may be evaluated twice (at least once,
// never lost).
type progress struct {
	// save writes a state to the state file.
	save func(fileState)
	// pending holds a token per event queued and not yet counted in done
	// (evaluated with every one before it): reading waits once it is full,
	// so what waits here (marks, early) and what a restart reads again stay
	// bounded while one event's evaluation lags behind the others.
	pending chan struct{}

	mu sync.Mutex
	// queued counts the events handed to the source; done is the number of
	// events evaluated with every one before them (events are numbered
	// from 1 in the order they were queued); early holds the numbers
	// evaluated after done+1 was not yet.
	queued, done uint64
	early        map[uint64]struct{}
	// marks are read positions in the order they were reached, each
	// recorded once the events queued before it (seq) were: the last of
	// them whose seq is done or less is the position to record.
	marks []mark
	// at is that position; saved what the state file holds.
	at, saved fileState
	// stopped: the input has stopped reading. Evaluations that end after
	// it save the state themselves, as nobody else will: when the last
	// event read is, and every stoppedSaveEvery events before that (the
	// workers may go on through a full queue after the input stopped, and
	// a write per event would hold them on mu).
	stopped bool
	// flushedDone is done when the state was last saved after the stop.
	flushedDone uint64
}

// stoppedSaveEvery is how many evaluations after the input stopped go
// between two saves: what a restart may read again if the workers stop
// too before the last.
const stoppedSaveEvery = 256

type mark struct {
	seq uint64
	st  fileState
}

// newProgress starts at from, with up to maxPending events queued and not
// evaluated.
func newProgress(from fileState, maxPending int, save func(fileState)) *progress {
	return &progress{save: save, pending: make(chan struct{}, maxPending), at: from, saved: from, early: map[uint64]struct{}{}}
}

// next numbers an event about to be queued, once fewer than maxPending
// are waiting for their evaluation; it fails only when ctx ends first.
func (p *progress) next(ctx context.Context) (uint64, error) {
	select {
	case p.pending <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queued++
	return p.queued, nil
}

// unqueue takes back the number next gave, for an event that was not
// queued after all (the input stopping while it waited for room).
func (p *progress) unqueue(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq == p.queued {
		p.queued--
		<-p.pending
	}
}

// reached records that reading got to st, after every event numbered so
// far.
func (p *progress) reached(st fileState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.marks); n > 0 && p.marks[n-1].seq == p.queued {
		// No event between the two: the later position stands for both,
		// so lines that are no events add no mark.
		p.marks[n-1].st = st
	} else {
		p.marks = append(p.marks, mark{seq: p.queued, st: st})
	}
	p.advance()
}

// evaluated records that event seq was evaluated (or deliberately not:
// anything but a stop before its evaluation).
func (p *progress) evaluated(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq != p.done+1 {
		p.early[seq] = struct{}{}
		return
	}
	p.done++
	<-p.pending
	for {
		if _, ok := p.early[p.done+1]; !ok {
			break
		}
		delete(p.early, p.done+1)
		p.done++
		<-p.pending
	}
	p.advance()
	if p.stopped && (p.done == p.queued || p.done-p.flushedDone >= stoppedSaveEvery) {
		p.flush()
		p.flushedDone = p.done
	}
}

// advance moves at past the marks whose events are all evaluated.
func (p *progress) advance() {
	i := 0
	for i < len(p.marks) && p.marks[i].seq <= p.done {
		p.at = p.marks[i].st
		i++
	}
	// Resliced, not copied: under load thousands of marks wait, and the
	// next growth of the slice leaves the front behind.
	p.marks = p.marks[i:]
}

// reset starts again at st, whatever is pending: the file was truncated in
// place, so the events before are gone, and a restart must not resume at
// an offset of the old content inside the new.
func (p *progress) reset(st fileState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marks = p.marks[:0]
	p.at = st
	p.flush()
}

// record saves the position reached by evaluation, if it moved.
func (p *progress) record() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flush()
}

// stop records the position and has every later evaluation record its own.
func (p *progress) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	p.flush()
	p.flushedDone = p.done
}

func (p *progress) flush() {
	if p.at != p.saved {
		p.save(p.at)
		p.saved = p.at
	}
}
