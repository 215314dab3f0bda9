package runtime

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vilaca/portal/internal/core"
)

// openFindings keeps each runtime finding open for a window, so the
// state-based outputs show an event: an alert that resolves when the
// window ends, a PolicyReport result per rule and target that goes away,
// the open-findings gauge. At most max are open: past it, the oldest of the
// namespace holding the most closes early, so a flood of events never grows
// the reports without bound, and one tenant's flood closes its own findings,
// not other namespaces'.
type openFindings struct {
	set    FindingSetter
	window time.Duration
	max    int
	m      *Metrics

	mu sync.Mutex
	// byObj holds the open findings of each target, by finding.
	byObj map[core.ObjectKey]*openObject
	n     int
	// fifos is, per namespace of the target, the order findings were
	// opened or renewed in, which is the order they expire in (one window
	// for all); an entry whose finding was renewed since is stale and
	// skipped. perNS counts the open findings of each namespace.
	fifos map[string][]fifoEntry
	perNS map[string]int
}

type openObject struct {
	ref      core.ResourceRef
	findings map[core.FindingID]openFinding
}

type openFinding struct {
	f       core.Finding
	expires time.Time
}

type fifoEntry struct {
	key     core.ObjectKey
	id      core.FindingID
	expires time.Time
}

func newOpenFindings(set FindingSetter, window time.Duration, limit int, m *Metrics) *openFindings {
	return &openFindings{set: set, window: window, max: limit, m: m, byObj: map[core.ObjectKey]*openObject{},
		fifos: map[string][]fifoEntry{}, perNS: map[string]int{}}
}

// add opens r's finding on its target, or renews it, until now+window.
func (o *openFindings) add(r core.Result, now time.Time) {
	if o.set == nil {
		return
	}
	f := core.Finding{Result: r, Producer: ProducerName, FirstSeen: now}
	id := f.ID()
	key := r.Resource.Key()
	o.mu.Lock()
	defer o.mu.Unlock()
	obj := o.byObj[key]
	if obj == nil {
		obj = &openObject{ref: r.Resource, findings: map[core.FindingID]openFinding{}}
		o.byObj[key] = obj
	}
	obj.ref = r.Resource
	if _, ok := obj.findings[id]; !ok {
		o.n++
		o.perNS[key.Namespace]++
	}
	exp := now.Add(o.window)
	obj.findings[id] = openFinding{f: f, expires: exp}
	o.fifos[key.Namespace] = append(o.fifos[key.Namespace], fifoEntry{key: key, id: id, expires: exp})
	dirty := map[core.ObjectKey]bool{key: true}
	for o.n > o.max {
		ns, ok := o.fullestLocked()
		if !ok {
			break
		}
		o.popLocked(ns, true, dirty)
	}
	o.publishLocked(dirty, now)
}

// fullestLocked returns the namespace with the most open findings (the
// first by name among equals).
func (o *openFindings) fullestLocked() (string, bool) {
	best, most := "", 0
	for ns, n := range o.perNS {
		if n > most || (n == most && ns < best) {
			best, most = ns, n
		}
	}
	return best, most > 0 && len(o.fifos[best]) > 0
}

// expire closes the findings whose window ended at or before now.
func (o *openFindings) expire(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	dirty := map[core.ObjectKey]bool{}
	for ns, fifo := range o.fifos {
		for len(fifo) > 0 && !fifo[0].expires.After(now) {
			o.popLocked(ns, false, dirty)
			fifo = o.fifos[ns]
		}
	}
	o.publishLocked(dirty, now)
}

// popLocked takes the oldest fifo entry and closes its finding unless it
// was renewed since.
func (o *openFindings) popLocked(ns string, capacity bool, dirty map[core.ObjectKey]bool) {
	e := o.fifos[ns][0]
	if rest := o.fifos[ns][1:]; len(rest) > 0 {
		o.fifos[ns] = rest
	} else {
		delete(o.fifos, ns) // let the backing array go
	}
	obj := o.byObj[e.key]
	if obj == nil {
		return
	}
	of, ok := obj.findings[e.id]
	if !ok || !of.expires.Equal(e.expires) {
		return
	}
	delete(obj.findings, e.id)
	o.n--
	if o.perNS[ns]--; o.perNS[ns] <= 0 {
		delete(o.perNS, ns)
	}
	dirty[e.key] = true
	reason := "window"
	if capacity {
		reason = "capacity"
	}
	o.m.Expired.WithLabelValues(reason).Inc()
}

func (o *openFindings) publishLocked(dirty map[core.ObjectKey]bool, now time.Time) {
	for key := range dirty {
		obj := o.byObj[key]
		if obj == nil {
			continue
		}
		fs := make([]core.Finding, 0, len(obj.findings))
		for _, of := range obj.findings {
			fs = append(fs, of.f)
		}
		slices.SortFunc(fs, func(a, b core.Finding) int {
			x, y := a.ID(), b.ID()
			return strings.Compare(x.RuleKind+"/"+x.RuleNamespace+"/"+x.RuleName, y.RuleKind+"/"+y.RuleNamespace+"/"+y.RuleName)
		})
		if len(fs) == 0 {
			delete(o.byObj, key)
		}
		o.set.Set(obj.ref, fs, now)
	}
}

// Len returns the number of open runtime findings.
func (o *openFindings) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}
