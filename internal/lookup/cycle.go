package lookup

import (
	"sync"
	"time"
)

// Cycle protection defaults: at most DefaultCycleLimit re-evaluations of one
// rule on one object in any DefaultCycleWindow.
const (
	DefaultCycleLimit  = 3
	DefaultCycleWindow = 10 * time.Second
)

// cycleGuard caps how often a dependency change may re-evaluate one rule on
// one object: a rule whose evaluation changes what it reads (through an
// action, a report it lists) would otherwise re-evaluate forever. What it
// suppresses the periodic resync re-evaluates.
type cycleGuard struct {
	limit  int
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	seen  map[Dependent][]time.Time
	swept time.Time
}

func newCycleGuard(limit int, window time.Duration) *cycleGuard {
	if limit <= 0 {
		limit = DefaultCycleLimit
	}
	if window <= 0 {
		window = DefaultCycleWindow
	}
	return &cycleGuard{limit: limit, window: window, now: time.Now, seen: map[Dependent][]time.Time{}}
}

// allow records a re-evaluation of dep and reports whether it is within the
// limit; first is true for the first refusal of dep in its window, so the
// caller logs once per burst.
func (g *cycleGuard) allow(dep Dependent) (ok, first bool) {
	now := g.now()
	cutoff := now.Add(-g.window)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep(now, cutoff)
	ts := g.seen[dep]
	i := 0
	for i < len(ts) && !ts[i].After(cutoff) {
		i++
	}
	ts = ts[i:]
	if len(ts) >= g.limit {
		// One marker past the limit tells later refusals apart from the
		// first.
		first = len(ts) == g.limit
		if first {
			ts = append(ts, now)
		}
		g.seen[dep] = ts
		return false, first
	}
	g.seen[dep] = append(ts, now)
	return true, false
}

// sweep drops pairs with nothing in their window, once a window, so the map
// holds only recently re-evaluated pairs.
func (g *cycleGuard) sweep(now, cutoff time.Time) {
	if now.Sub(g.swept) < g.window {
		return
	}
	g.swept = now
	for dep, ts := range g.seen {
		if len(ts) == 0 || !ts[len(ts)-1].After(cutoff) {
			delete(g.seen, dep)
		}
	}
}
