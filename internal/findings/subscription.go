package findings

import (
	"context"
	"time"

	"github.com/vilaca/portal/internal/core"
)

// Subscription follows the pipeline's changes for one sink. It marks the
// objects whose findings changed since its last batch, so a slow sink sees
// the latest state of each object once, however often it changed
// meanwhile, and memory stays bounded by the number of objects.
type Subscription struct {
	pipeline *Pipeline
	full     bool
	dirty    map[core.ObjectKey]time.Time
	notify   chan struct{}
}

// Subscribe starts following the pipeline. The first batch is full: the
// state of every object with findings, of every producer.
func (p *Pipeline) Subscribe() *Subscription {
	sub := &Subscription{pipeline: p, full: true, dirty: map[core.ObjectKey]time.Time{}, notify: make(chan struct{}, 1)}
	p.mu.Lock()
	p.subs[sub] = struct{}{}
	p.mu.Unlock()
	sub.notify <- struct{}{}
	return sub
}

// Close stops following the pipeline.
func (sub *Subscription) Close() {
	sub.pipeline.mu.Lock()
	delete(sub.pipeline.subs, sub)
	sub.pipeline.mu.Unlock()
}

// markLocked keeps, per object, the earliest known observation of the
// changes not yet delivered.
func (sub *Subscription) markLocked(key core.ObjectKey, observed time.Time) {
	if t, ok := sub.dirty[key]; !ok || (t.IsZero() && !observed.IsZero()) || (!observed.IsZero() && observed.Before(t)) {
		sub.dirty[key] = observed
	}
	sub.wake()
}

func (sub *Subscription) wake() {
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// Pending returns the number of objects changed since the last batch.
func (sub *Subscription) Pending() int {
	sub.pipeline.mu.Lock()
	defer sub.pipeline.mu.Unlock()
	return len(sub.dirty)
}

// Next blocks until objects changed (or, first, for the full state) and
// returns the current state of up to max of them (a full batch is never
// cut). It returns ctx's error when ctx ends first.
func (sub *Subscription) Next(ctx context.Context, max int) (core.FindingBatch, error) {
	for {
		if b, ok := sub.take(max); ok {
			return b, nil
		}
		select {
		case <-sub.notify:
		case <-ctx.Done():
			return core.FindingBatch{}, ctx.Err()
		}
	}
}

func (sub *Subscription) take(max int) (core.FindingBatch, bool) {
	p := sub.pipeline
	p.mu.Lock()
	defer p.mu.Unlock()
	if sub.full {
		sub.full = false
		clear(sub.dirty)
		b := core.FindingBatch{Full: true, Objects: make([]core.ObjectFindings, 0, len(p.objects))}
		for _, o := range p.objects {
			b.Objects = append(b.Objects, core.ObjectFindings{Object: o.ref, Findings: o.merged})
		}
		return b, true
	}
	if len(sub.dirty) == 0 {
		return core.FindingBatch{}, false
	}
	var b core.FindingBatch
	for key, observed := range sub.dirty {
		if max > 0 && len(b.Objects) >= max {
			break
		}
		delete(sub.dirty, key)
		of := core.ObjectFindings{Observed: observed}
		if o := p.objects[key]; o != nil {
			of.Object, of.Findings = o.ref, o.merged
		} else {
			of.Object = core.ResourceRef{APIVersion: key.APIVersion, Kind: key.Kind, Namespace: key.Namespace, Name: key.Name}
		}
		b.Objects = append(b.Objects, of)
	}
	if len(sub.dirty) > 0 {
		sub.wake()
	}
	return b, true
}

// Retry marks the objects of a batch a sink failed to publish as changed
// again, so the next batch carries their (then current) state.
func (sub *Subscription) Retry(b core.FindingBatch) {
	p := sub.pipeline
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.Full {
		sub.full = true
	}
	for _, of := range b.Objects {
		sub.markLocked(of.Object.Key(), of.Observed)
	}
	sub.wake()
}
