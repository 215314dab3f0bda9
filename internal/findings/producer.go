package findings

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/core"
)

// Producer is one producer's handle on the pipeline. It reads and writes only
// its own findings: another producer's findings on the same object are out
// of its reach, whatever it publishes. It is safe for concurrent use.
//
// The pipeline takes ownership of the finding slices handed to it: a
// producer builds a new slice for each call and does not change it after.
type Producer struct {
	pipeline *Pipeline
	name     string
	synced   <-chan struct{}
	counter  RuleCounter
	gauge    prometheus.Gauge
	// exemptions hears the exempted counts; exempted holds them, by
	// exception (core.Exception.String).
	exemptions ExemptionCounter

	// Guarded by pipeline.mu. keys are the objects this producer has
	// findings on; open counts its failing findings per rule.
	keys     map[core.ObjectKey]struct{}
	open     map[core.FindingID]int
	exempted map[string]int
}

// Name returns the producer's name.
func (pr *Producer) Name() string { return pr.name }

// Set records the current findings of one object (none: it has no findings
// of this producer any more), keeping FirstSeen of findings already open. It
// reports whether they differ from those held. observed is when the change
// that led to this state was seen, for the latency metric (zero: unknown).
func (pr *Producer) Set(ref core.ResourceRef, findings []core.Finding, observed time.Time) bool {
	p := pr.pipeline
	p.mu.Lock()
	defer p.mu.Unlock()
	return pr.setLocked(ref, findings, observed)
}

// Delete forgets this producer's findings on an object.
func (pr *Producer) Delete(key core.ObjectKey, observed time.Time) {
	p := pr.pipeline
	p.mu.Lock()
	defer p.mu.Unlock()
	pr.removeLocked(key, observed)
}

// DeleteFunc forgets this producer's findings on every object for which drop
// returns true (for audit: the objects of a kind no rule audits any more).
// The findings other producers hold on those objects stay.
func (pr *Producer) DeleteFunc(drop func(core.ObjectKey) bool, observed time.Time) {
	p := pr.pipeline
	p.mu.Lock()
	defer p.mu.Unlock()
	for key := range pr.keys {
		if drop(key) {
			pr.removeLocked(key, observed)
		}
	}
}

// Publish applies a batch of this producer's state. An incremental batch
// sets the findings of the objects it lists. A full batch is everything the
// producer finds now: its findings on objects the batch does not list are
// dropped, and only its own. The sinks see the whole batch at once, never a
// part of it.
func (pr *Producer) Publish(b core.FindingBatch) {
	p := pr.pipeline
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.Full {
		listed := make(map[core.ObjectKey]struct{}, len(b.Objects))
		for _, of := range b.Objects {
			listed[of.Object.Key()] = struct{}{}
		}
		for key := range pr.keys {
			if _, ok := listed[key]; !ok {
				pr.removeLocked(key, now)
			}
		}
	}
	for _, of := range b.Objects {
		pr.setLocked(of.Object, of.Findings, of.Observed)
	}
}

// Len returns the number of objects this producer has findings on.
func (pr *Producer) Len() int {
	p := pr.pipeline
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(pr.keys)
}

// Snapshot returns this producer's findings, by object.
func (pr *Producer) Snapshot() []core.ObjectFindings {
	p := pr.pipeline
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]core.ObjectFindings, 0, len(pr.keys))
	for key := range pr.keys {
		o := p.objects[key]
		out = append(out, core.ObjectFindings{Object: o.ref, Findings: o.partOf(pr)})
	}
	return out
}

func (pr *Producer) setLocked(ref core.ResourceRef, findings []core.Finding, observed time.Time) bool {
	p := pr.pipeline
	for i := range findings {
		findings[i].Producer = pr.name
	}
	key := ref.Key()
	o := p.objects[key]
	var old []core.Finding
	if o != nil {
		old = o.partOf(pr)
	}
	if len(old) == 0 && len(findings) == 0 {
		return false
	}
	carryFirstSeen(old, findings)
	if len(old) > 0 && o.ref == ref && sameFindings(old, findings) {
		return false
	}
	if o == nil {
		o = &object{}
		p.objects[key] = o
	}
	o.ref = ref
	o.setPart(pr, findings)
	if len(o.parts) == 0 {
		delete(p.objects, key)
	}
	if len(findings) == 0 {
		delete(pr.keys, key)
	} else {
		pr.keys[key] = struct{}{}
	}
	pr.gauge.Set(float64(len(pr.keys)))
	pr.countLocked(old, -1)
	pr.countLocked(findings, +1)
	p.markLocked(key, observed)
	return true
}

func (pr *Producer) removeLocked(key core.ObjectKey, observed time.Time) {
	o := pr.pipeline.objects[key]
	if o == nil {
		return
	}
	pr.setLocked(o.ref, nil, observed)
}

// countLocked keeps the producer's per-rule open violation counts and tells
// its rule counter. It runs under the pipeline's lock so the counts reach
// the counter in order.
func (pr *Producer) countLocked(fs []core.Finding, delta int) {
	seen := map[core.FindingID]*core.Rule{}
	for i := range fs {
		if fs[i].Outcome != core.OutcomeFail {
			continue
		}
		id := fs[i].ID()
		id.Container = ""
		pr.open[id] += delta
		if pr.open[id] <= 0 {
			delete(pr.open, id)
		}
		seen[id] = fs[i].Rule
	}
	pr.countExemptedLocked(fs, delta)
	if pr.counter == nil {
		return
	}
	for id, r := range seen {
		pr.counter.SetViolations(r, pr.open[id])
	}
}

// countExemptedLocked counts fs, the findings of one object, once for each
// exception with a skip among them.
func (pr *Producer) countExemptedLocked(fs []core.Finding, delta int) {
	if pr.exemptions == nil {
		return
	}
	var seen []*core.Exception
	for i := range fs {
		x := fs[i].Exception
		if fs[i].Outcome != core.OutcomeSkip || x == nil || slices.ContainsFunc(seen, func(y *core.Exception) bool { return y.String() == x.String() }) {
			continue
		}
		seen = append(seen, x)
		k := x.String()
		pr.exempted[k] += delta
		if pr.exempted[k] <= 0 {
			delete(pr.exempted, k)
		}
		pr.exemptions.SetExempted(x, pr.exempted[k])
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
// reader of a report: the same findings, outcomes, messages, severities and categories.
func sameFindings(a, b []core.Finding) bool {
	return slices.EqualFunc(a, b, func(x, y core.Finding) bool {
		return x.ID() == y.ID() && x.Outcome == y.Outcome && x.Message == y.Message &&
			x.ContainerType == y.ContainerType && x.Severity() == y.Severity() && x.Category() == y.Category() &&
			x.FirstSeen.Equal(y.FirstSeen) && exceptionRef(x.Exception) == exceptionRef(y.Exception)
	})
}

// exceptionRef names an exception for comparison: a failure that an
// exception of mode actions starts or stops covering changes what the
// actions do, though its message does not change.
func exceptionRef(x *core.Exception) string {
	if x == nil {
		return ""
	}
	return x.String()
}
