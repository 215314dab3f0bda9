package rule

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/vilaca/portal/internal/engine"
)

// ruleLabel is the label of Portal's per-rule metrics; its value is
// core.Rule.MetricLabel.
const ruleLabel = "rule"

// Series keeps the per-rule metric series in step with the rule set: when
// the set changes, it deletes every series whose rule is no longer in it.
// Without it a tenant who renames a PortalRule in a loop, with one
// evaluation error each time, grows Portal's metrics (and every scrape)
// by a series per name, for as long as the process lives.
type Series struct {
	rules func() []*engine.Rule

	mu   sync.Mutex
	vecs []*prometheus.MetricVec
}

// NewSeries returns a Series that reads the current rule set from rules;
// the engine's Rules holds the new set when Index.OnChange fires.
func NewSeries(rules func() []*engine.Rule) *Series { return &Series{rules: rules} }

// Track adds vecs, each with a "rule" label, to what Sweep prunes.
func (s *Series) Track(vecs ...*prometheus.MetricVec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vecs = append(s.vecs, vecs...)
}

// Sweep deletes the series of rules no longer in the rule set. It reads
// what each vec holds rather than remembering the previous set, so a
// series an evaluation still running with the old set adds after one sweep
// goes at the next. Subscribe it with Index.OnChange.
func (s *Series) Sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.vecs) == 0 {
		return
	}
	live := map[string]bool{}
	for _, r := range s.rules() {
		live[r.MetricLabel()] = true
	}
	for _, v := range s.vecs {
		for _, name := range ruleValues(v) {
			if !live[name] {
				v.DeletePartialMatch(prometheus.Labels{ruleLabel: name})
			}
		}
	}
}

// ruleValues lists the distinct rule label values of v's series.
func ruleValues(v *prometheus.MetricVec) []string {
	ch := make(chan prometheus.Metric)
	go func() {
		v.Collect(ch)
		close(ch)
	}()
	seen := map[string]bool{}
	var out []string
	var m dto.Metric
	for metric := range ch {
		m.Reset()
		if metric.Write(&m) != nil {
			continue
		}
		for _, lp := range m.GetLabel() {
			if lp.GetName() == ruleLabel && !seen[lp.GetValue()] {
				seen[lp.GetValue()] = true
				out = append(out, lp.GetValue())
			}
		}
	}
	return out
}
