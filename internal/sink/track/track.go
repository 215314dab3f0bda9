// Package track remembers what a sink last published for each object, so a
// state-based batch (core.FindingBatch) can be turned into the changes some
// sinks speak in: findings raised, resolved and changed.
package track

import (
	"time"

	"github.com/vilaca/portal/internal/core"
)

// Delta is what changed on one object.
type Delta struct {
	Object core.ResourceRef
	// Old and New are the object's findings before and after the batch.
	Old, New []core.Finding
	// Observed is the batch entry's ObjectFindings.Observed.
	Observed time.Time
}

// Tracker holds the findings last seen per object. It is not safe for
// concurrent use; sinks call it from Publish, which is never concurrent.
type Tracker struct {
	last map[core.ObjectKey]core.ObjectFindings
}

// New returns an empty tracker.
func New() *Tracker { return &Tracker{last: map[core.ObjectKey]core.ObjectFindings{}} }

// Apply records a batch and returns the objects whose findings changed,
// including, for a full batch, every object held that the batch does not
// list (its findings are all resolved).
func (t *Tracker) Apply(b core.FindingBatch) []Delta {
	var out []Delta
	seen := map[core.ObjectKey]bool{}
	for _, of := range b.Objects {
		key := of.Object.Key()
		seen[key] = true
		prev := t.last[key]
		if len(prev.Findings) == 0 && len(of.Findings) == 0 {
			continue
		}
		out = append(out, Delta{Object: of.Object, Old: prev.Findings, New: of.Findings, Observed: of.Observed})
		if len(of.Findings) == 0 {
			delete(t.last, key)
		} else {
			t.last[key] = of
		}
	}
	if b.Full {
		for key, prev := range t.last {
			if !seen[key] {
				out = append(out, Delta{Object: prev.Object, Old: prev.Findings})
				delete(t.last, key)
			}
		}
	}
	return out
}

// Len returns the number of objects with findings held.
func (t *Tracker) Len() int { return len(t.last) }

// Diff splits the change of one object's findings into findings raised (new
// identities), resolved (gone) and changed (same identity, different
// outcome, message, severity or category; the new version).
func Diff(old, new []core.Finding) (raised, resolved, changed []core.Finding) {
	prev := make(map[core.FindingID]*core.Finding, len(old))
	for i := range old {
		prev[old[i].ID()] = &old[i]
	}
	for i := range new {
		f := &new[i]
		id := f.ID()
		p, ok := prev[id]
		switch {
		case !ok:
			raised = append(raised, *f)
		case p.Outcome != f.Outcome || p.Message != f.Message || p.Severity() != f.Severity() || p.Category() != f.Category():
			changed = append(changed, *f)
		}
		delete(prev, id)
	}
	for i := range old {
		if _, gone := prev[old[i].ID()]; gone {
			resolved = append(resolved, old[i])
		}
	}
	return raised, resolved, changed
}
