package lookup

import (
	"container/heap"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Cycle protection defaults: at most DefaultCycleLimit re-evaluations of one
// rule on one object in any DefaultCycleWindow.
const (
	DefaultCycleLimit  = 3
	DefaultCycleWindow = 10 * time.Second
)

// cycleGuard rate-limits how often a dependency change may re-evaluate one
// rule on one object: a rule whose evaluation changes what it reads (through
// an action, a report it lists) would otherwise re-evaluate forever.
//
// A change past the limit is not dropped: a legitimate burst (four
// PodDisruptionBudgets applied at once) looks the same as a cycle, and
// dropping its last changes would leave a wrong finding until the resync.
// Instead the pair gets one trailing re-evaluation, due when its oldest
// re-evaluation leaves the window; further suppressed changes coalesce into
// it. A true cycle is thereby slowed to the limit per window, never stopped
// and never spinning.
type cycleGuard struct {
	limit      int
	window     time.Duration
	maxPending int
	clock      clock.WithDelayedExecution
	// onDue hears of the trailing re-evaluations that are due, outside the
	// lock, from the timer's goroutine.
	onDue func([]Dependent)

	mu   sync.Mutex
	seen map[Dependent][]time.Time
	// streaks counts, per pair, the deferrals in a row that came within
	// two windows of each other: a burst defers a pair once, a cycle in
	// every window.
	streaks map[Dependent]streak
	swept   time.Time
	// pending holds the pairs with a trailing re-evaluation, at most
	// maxPending; due orders them by when they are due.
	pending map[Dependent]*trailing
	// byObject finds an object's pending pairs when it is deleted.
	byObject map[ObjectKey][]*trailing
	due      trailingHeap
	timer    clock.Timer
	stopped  bool
}

// streak is a pair's run of deferrals, each within two windows of the last.
type streak struct {
	n    int
	last time.Time
}

// CycleWarnStreak is how many windows in a row a pair must be deferred
// before the guard's deferral is logged as a warning (a likely cycle); a
// burst of changes (four Ingresses applied at once, each read by the
// others) is deferred once and logged at debug level.
const CycleWarnStreak = 3

// trailing is a pair's re-evaluation deferred to when the guard allows it.
type trailing struct {
	dep Dependent
	at  time.Time
	i   int
}

// verdict is what the guard made of a change's re-evaluation of a pair.
type verdict int

const (
	// evaluate now.
	allowed verdict = iota
	// suppressed; a trailing re-evaluation was scheduled by this change.
	deferred
	// suppressed; the pair's trailing re-evaluation was already scheduled.
	coalesced
	// suppressed; the pending set is full, so only the resync re-evaluates.
	dropped
)

func newCycleGuard(clk clock.WithDelayedExecution, limit int, window time.Duration, maxPending int, onDue func([]Dependent)) *cycleGuard {
	if limit <= 0 {
		limit = DefaultCycleLimit
	}
	if window <= 0 {
		window = DefaultCycleWindow
	}
	if maxPending <= 0 {
		maxPending = DefaultMaxDependencies
	}
	return &cycleGuard{limit: limit, window: window, maxPending: maxPending, clock: clk, onDue: onDue,
		seen: map[Dependent][]time.Time{}, streaks: map[Dependent]streak{}, pending: map[Dependent]*trailing{}, byObject: map[ObjectKey][]*trailing{}}
}

// allow records a re-evaluation of dep when it is within the limit, and
// otherwise defers it to the pair's trailing re-evaluation. For a deferral
// it also returns how many windows in a row the pair has been deferred.
func (g *cycleGuard) allow(dep Dependent) (verdict, int) {
	now := g.clock.Now()
	cutoff := now.Add(-g.window)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep(now, cutoff)
	ts := g.inWindow(dep, cutoff)
	if len(ts) < g.limit {
		g.seen[dep] = append(ts, now)
		// This re-evaluation reads every change so far: the pair's
		// trailing one has nothing left to do.
		if t := g.pending[dep]; t != nil {
			g.unschedule(t)
		}
		return allowed, 0
	}
	switch {
	case g.pending[dep] != nil:
		return coalesced, 0
	case g.stopped || len(g.pending) >= g.maxPending:
		return dropped, 0
	}
	g.schedule(&trailing{dep: dep, at: ts[0].Add(g.window)}, now)
	st := g.streaks[dep]
	if now.Sub(st.last) > 2*g.window {
		st.n = 0
	}
	st.n++
	st.last = now
	g.streaks[dep] = st
	return deferred, st.n
}

// inWindow returns dep's re-evaluations after cutoff.
func (g *cycleGuard) inWindow(dep Dependent, cutoff time.Time) []time.Time {
	ts := g.seen[dep]
	i := 0
	for i < len(ts) && !ts[i].After(cutoff) {
		i++
	}
	return ts[i:]
}

func (g *cycleGuard) schedule(t *trailing, now time.Time) {
	g.pending[t.dep] = t
	g.byObject[t.dep.Object] = append(g.byObject[t.dep.Object], t)
	heap.Push(&g.due, t)
	if g.due[0] == t {
		g.arm(now)
	}
}

func (g *cycleGuard) unschedule(t *trailing) {
	delete(g.pending, t.dep)
	heap.Remove(&g.due, t.i)
	ts := slices.DeleteFunc(g.byObject[t.dep.Object], func(x *trailing) bool { return x == t })
	if len(ts) == 0 {
		delete(g.byObject, t.dep.Object)
	} else {
		g.byObject[t.dep.Object] = ts
	}
}

// arm sets the timer to the earliest trailing re-evaluation.
func (g *cycleGuard) arm(now time.Time) {
	if len(g.due) == 0 {
		return
	}
	d := g.due[0].at.Sub(now)
	// A new timer each time rather than Reset: a fake clock's AfterFunc
	// timer blocks its Step on the second firing. A fake clock also runs
	// the function inside Step, holding its lock, which fire's clock.Now
	// would wait on: fire runs on its own goroutine, as with a real timer.
	if g.timer != nil {
		g.timer.Stop()
	}
	g.timer = g.clock.AfterFunc(d, func() { go g.fire() })
}

// fire hands the due trailing re-evaluations to onDue, recording each as a
// re-evaluation of its pair so that a cycle stays within the limit.
func (g *cycleGuard) fire() {
	now := g.clock.Now()
	cutoff := now.Add(-g.window)
	var due []Dependent
	g.mu.Lock()
	for len(g.due) > 0 && !g.due[0].at.After(now) {
		t := g.due[0]
		g.unschedule(t)
		g.seen[t.dep] = append(g.inWindow(t.dep, cutoff), now)
		due = append(due, t.dep)
	}
	if !g.stopped {
		g.arm(now)
	}
	g.mu.Unlock()
	if len(due) > 0 {
		g.onDue(due)
	}
}

// forgetObject drops obj's pending re-evaluations: it is gone. Its history
// goes with the next sweep.
func (g *cycleGuard) forgetObject(obj ObjectKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range slices.Clone(g.byObject[obj]) {
		g.unschedule(t)
	}
}

// forgetRules drops the pending re-evaluations, and the history, of the
// pairs whose rule keep does not keep: the rule is gone.
func (g *cycleGuard) forgetRules(keep func(RuleKey) bool) {
	drop := func(dep Dependent) bool { return !keep(dep.Rule) }
	g.mu.Lock()
	defer g.mu.Unlock()
	for dep, t := range g.pending {
		if drop(dep) {
			g.unschedule(t)
		}
	}
	for dep := range g.seen {
		if drop(dep) {
			delete(g.seen, dep)
		}
	}
}

// pendingLen returns how many pairs have a trailing re-evaluation.
func (g *cycleGuard) pendingLen() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// stop drops every pending re-evaluation and schedules no more.
func (g *cycleGuard) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	if g.timer != nil {
		g.timer.Stop()
	}
	clear(g.pending)
	clear(g.byObject)
	g.due = nil
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
	for dep, st := range g.streaks {
		if now.Sub(st.last) > 2*g.window {
			delete(g.streaks, dep)
		}
	}
}

// trailingHeap orders trailing re-evaluations by when they are due.
type trailingHeap []*trailing

func (h trailingHeap) Len() int           { return len(h) }
func (h trailingHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h trailingHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *trailingHeap) Push(x any) {
	t := x.(*trailing)
	t.i = len(*h)
	*h = append(*h, t)
}
func (h *trailingHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
