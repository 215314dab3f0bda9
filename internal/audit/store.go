package audit

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/vilaca/portal/internal/core"
)

// Store holds the open findings of every audited object: the truth the sinks
// publish. Every replica keeps one, fed by its own informers, so a replica
// that becomes leader can publish the full current state at once.
//
// Sinks read it through subscriptions: a subscription marks the objects whose
// findings changed since its last batch, so a slow sink sees the latest state
// of each object once, however often it changed meanwhile, and memory stays
// bounded by the number of objects.
type Store struct {
	mu      sync.Mutex
	objects map[core.ObjectKey]*entry
	subs    map[*Subscription]struct{}
	// open counts the failing findings of each rule, for rule status.
	open    map[core.FindingID]int
	counter RuleCounter
}

type entry struct {
	ref      core.ResourceRef
	findings []core.Finding
}

// RuleCounter receives rule evaluation and violation counts for rule status;
// *rule.StatusCounts is one.
type RuleCounter interface {
	// Evaluated counts one evaluation of r on one object.
	Evaluated(r *core.Rule)
	// SetViolations sets the number of open violations of r.
	SetViolations(r *core.Rule, n int)
}

// NewStore returns an empty store. counter may be nil.
func NewStore(counter RuleCounter) *Store {
	return &Store{
		objects: map[core.ObjectKey]*entry{},
		subs:    map[*Subscription]struct{}{},
		open:    map[core.FindingID]int{},
		counter: counter,
	}
}

// Set records the findings of one object, keeping FirstSeen of findings that
// were already open, and marks the object changed for every subscription when
// its findings differ from those held. It reports whether they did.
func (s *Store) Set(ref core.ResourceRef, findings []core.Finding, observed time.Time) bool {
	key := ref.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	var old []core.Finding
	if e := s.objects[key]; e != nil {
		old = e.findings
		carryFirstSeen(old, findings)
		if e.ref == ref && sameFindings(old, findings) {
			return false
		}
	} else if len(findings) == 0 {
		return false
	}
	if len(findings) == 0 {
		delete(s.objects, key)
	} else {
		s.objects[key] = &entry{ref: ref, findings: findings}
	}
	s.countLocked(old, -1)
	s.countLocked(findings, +1)
	s.markLocked(key, observed)
	return true
}

// Delete forgets an object's findings.
func (s *Store) Delete(key core.ObjectKey, observed time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.objects[key]
	if e == nil {
		return
	}
	delete(s.objects, key)
	s.countLocked(e.findings, -1)
	s.markLocked(key, observed)
}

// DeleteFunc forgets the findings of every object for which drop returns
// true: the objects of a kind no rule audits any more.
func (s *Store) DeleteFunc(drop func(core.ObjectKey) bool, observed time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, e := range s.objects {
		if drop(key) {
			delete(s.objects, key)
			s.countLocked(e.findings, -1)
			s.markLocked(key, observed)
		}
	}
}

// Len returns the number of objects with findings.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

// Snapshot returns the state of every object with findings.
func (s *Store) Snapshot() []core.ObjectFindings {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]core.ObjectFindings, 0, len(s.objects))
	for _, e := range s.objects {
		out = append(out, core.ObjectFindings{Object: e.ref, Findings: e.findings})
	}
	return out
}

// countLocked keeps the per-rule open violation counts and tells the rule
// counter. It runs under mu so the counts reach the counter in order.
func (s *Store) countLocked(fs []core.Finding, delta int) {
	seen := map[core.FindingID]*core.Rule{}
	for i := range fs {
		if fs[i].Outcome != core.OutcomeFail {
			continue
		}
		id := fs[i].ID()
		id.Container = ""
		s.open[id] += delta
		if s.open[id] <= 0 {
			delete(s.open, id)
		}
		seen[id] = fs[i].Rule
	}
	if s.counter == nil {
		return
	}
	for id, r := range seen {
		s.counter.SetViolations(r, s.open[id])
	}
}

func (s *Store) markLocked(key core.ObjectKey, observed time.Time) {
	for sub := range s.subs {
		sub.markLocked(key, observed)
	}
}

// carryFirstSeen copies FirstSeen from the findings already open to the same
// findings in next.
func carryFirstSeen(prev, next []core.Finding) {
	if len(prev) == 0 {
		return
	}
	first := make(map[core.FindingID]time.Time, len(prev))
	for i := range prev {
		first[prev[i].ID()] = prev[i].FirstSeen
	}
	for i := range next {
		if t, ok := first[next[i].ID()]; ok {
			next[i].FirstSeen = t
		}
	}
}

// sameFindings reports whether two finding lists say the same thing to a
// reader of a report: the same findings, outcomes, messages and severities.
func sameFindings(a, b []core.Finding) bool {
	return slices.EqualFunc(a, b, func(x, y core.Finding) bool {
		return x.ID() == y.ID() && x.Outcome == y.Outcome && x.Message == y.Message &&
			x.ContainerType == y.ContainerType && x.Severity() == y.Severity() &&
			x.FirstSeen.Equal(y.FirstSeen)
	})
}

// Subscription follows the store's changes for one sink.
type Subscription struct {
	store  *Store
	full   bool
	dirty  map[core.ObjectKey]time.Time
	notify chan struct{}
}

// Subscribe starts following the store. The first batch is full: the state
// of every object with findings.
func (s *Store) Subscribe() *Subscription {
	sub := &Subscription{store: s, full: true, dirty: map[core.ObjectKey]time.Time{}, notify: make(chan struct{}, 1)}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	sub.notify <- struct{}{}
	return sub
}

// Close stops following the store.
func (sub *Subscription) Close() {
	sub.store.mu.Lock()
	delete(sub.store.subs, sub)
	sub.store.mu.Unlock()
}

func (sub *Subscription) markLocked(key core.ObjectKey, observed time.Time) {
	if t, ok := sub.dirty[key]; !ok || (t.IsZero() && !observed.IsZero()) || (!observed.IsZero() && observed.Before(t)) {
		sub.dirty[key] = observed
	}
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// Pending returns the number of objects changed since the last batch.
func (sub *Subscription) Pending() int {
	sub.store.mu.Lock()
	defer sub.store.mu.Unlock()
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
	s := sub.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub.full {
		sub.full = false
		clear(sub.dirty)
		b := core.FindingBatch{Full: true, Objects: make([]core.ObjectFindings, 0, len(s.objects))}
		for _, e := range s.objects {
			b.Objects = append(b.Objects, core.ObjectFindings{Object: e.ref, Findings: e.findings})
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
		if e := s.objects[key]; e != nil {
			of.Object, of.Findings = e.ref, e.findings
		} else {
			of.Object = core.ResourceRef{APIVersion: key.APIVersion, Kind: key.Kind, Namespace: key.Namespace, Name: key.Name}
		}
		b.Objects = append(b.Objects, of)
	}
	if len(sub.dirty) > 0 {
		select {
		case sub.notify <- struct{}{}:
		default:
		}
	}
	return b, true
}

// Retry marks the objects of a batch a sink failed to publish as changed
// again, so the next batch carries their (then current) state.
func (sub *Subscription) Retry(b core.FindingBatch) {
	s := sub.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.Full {
		sub.full = true
	}
	for _, of := range b.Objects {
		sub.markLocked(of.Object.Key(), of.Observed)
	}
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}
