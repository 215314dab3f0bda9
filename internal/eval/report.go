package eval

import (
	"cmp"
	"errors"
	"io"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// Resource identifies an evaluated object in a report.
type Resource struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
}

// Result is one verdict in a report.
type Result struct {
	Resource Resource `json:"resource"`
	Rule     string   `json:"rule"`
	Severity string   `json:"severity"`
	// Category is the rule's category; omitted when it has none.
	Category          string `json:"category,omitempty"`
	EnforcementAction string `json:"enforcementAction"`
	Result            string `json:"result"`
	Container         string `json:"container,omitempty"`
	Message           string `json:"message,omitempty"`
	// Exception names the exception behind a skip (--exceptions), or the
	// one that keeps a failure's actions off the object.
	Exception string `json:"exception,omitempty"`

	denies bool
}

// Summary counts results by outcome.
type Summary struct {
	Pass  int `json:"pass"`
	Fail  int `json:"fail"`
	Error int `json:"error"`
	// Skip counts the results exceptions exempted (--exceptions).
	Skip int `json:"skip,omitempty"`
}

// add counts o's results too.
func (s *Summary) add(o Summary) {
	s.Pass += o.Pass
	s.Fail += o.Fail
	s.Error += o.Error
	s.Skip += o.Skip
}

// Report is the output of one evaluation run.
type Report struct {
	Results []Result `json:"results"`
	Summary Summary  `json:"summary"`

	objects int
	denied  bool
	// encoded holds the results already written as JSON array elements
	// (each led by a comma), one chunk per batch, when the run was asked for
	// JSON, instead of Results: the workers encode in parallel and the run
	// keeps bytes, not structs, and never copies them.
	encoded [][]byte
	isJSON  bool
	// isYAML: encoded (or spill) holds the results as YAML sequence
	// entries, encoded by the workers a batch at a time.
	isYAML bool
	// junit, for a report evaluated for JUnit, holds the encoded test
	// cases instead of Results.
	junit *junitStore
	// failuresOnly: the report lists failures and errors and only counts
	// passes (the table's default, Options.Passes), so it holds no pass.
	failuresOnly bool
	// isTable: the report was evaluated for the table; tablePasses, it
	// lists passes too (PassesShown).
	isTable, tablePasses bool
	// spill, when set, holds the encoded results instead of encoded.
	spill *spill
	// matched holds the rules that gave at least one result.
	matched map[string]struct{}
}

// Unmatched returns the names of the rules of eng that the run could apply
// (enabled, in mode when one is set) and that matched no object at all: a
// typo in match.gvk, a namespace include that nothing in the input has, a
// kind the input does not contain.
func (r *Report) Unmatched(eng *engine.Engine, mode core.Mode) []string {
	var out []string
	for _, rl := range eng.Rules() {
		if !rl.Enabled || (mode != "" && !rl.HasMode(mode)) {
			continue
		}
		if _, ok := r.matched[rl.Name]; !ok {
			out = append(out, rl.Name)
		}
	}
	return out
}

func (r *Report) addMatched(names map[string]struct{}) {
	if r.matched == nil {
		r.matched = make(map[string]struct{}, len(names))
	}
	for n := range names {
		r.matched[n] = struct{}{}
	}
}

// Objects counts the Kubernetes objects the run read, matched by a rule or not.
func (r *Report) Objects() int { return r.objects }

// Denied reports whether any result would reject an admission request: a
// failing deny rule, or an erroring rule with onError=deny.
func (r *Report) Denied() bool { return r.denied }

// Merge appends other's results, summary and errors to r, as if one run had
// evaluated r's input and then other's. Both must be made for the same
// format.
func (r *Report) Merge(other *Report) {
	r.objects += other.objects
	r.denied = r.denied || other.denied
	r.Summary.add(other.Summary)
	r.Results = append(r.Results, other.Results...)
	for _, c := range other.encoded {
		r.addEncoded(c)
	}
	if other.spill != nil {
		r.addSpilled(other.spill)
	}
	if other.junit != nil {
		r.junit.merge(other.junit)
	}
	r.addMatched(other.matched)
}

// addEncoded appends a chunk of encoded results.
func (r *Report) addEncoded(c []byte) {
	if r.spill != nil {
		r.spill.write(c)
		return
	}
	r.encoded = append(r.encoded, c)
}

// failSpill records err for Write to report (a report missing results must
// not pass), keeping the spill's file for Close.
func (r *Report) failSpill(err error) {
	if r.spill != nil {
		r.spill.err = cmp.Or(r.spill.err, err)
		return
	}
	r.spill = &spill{err: err}
}

// addSpilled appends the results another report spilled.
func (r *Report) addSpilled(s *spill) {
	rd, err := s.contents(0)
	switch {
	case err != nil:
		r.failSpill(err)
	case r.spill != nil:
		r.spill.readFrom(rd)
	default:
		b, err := io.ReadAll(rd)
		if err != nil {
			r.spill = &spill{err: err}
			return
		}
		r.encoded = append(r.encoded, b)
	}
}

// Close releases what the report holds outside memory (see
// Options.SpillDir). The report cannot be written after.
func (r *Report) Close() error {
	var err error
	if r.junit != nil && r.junit.spill != nil && r.junit.spill.f != nil {
		err = r.junit.spill.close()
		r.junit.err = errors.New("the report was closed")
	}
	if r.spill == nil || r.spill.f == nil {
		return err
	}
	err = errors.Join(err, r.spill.close())
	r.spill = &spill{err: errors.New("the report was closed")}
	return err
}

// NewReport returns an empty report for format, to Merge runs into.
func NewReport(format string) *Report {
	rep := &Report{isJSON: format == "json", isYAML: format == "yaml", isTable: format == "table", failuresOnly: format == "table"}
	switch {
	case format == "junit":
		rep.junit = &junitStore{}
	case !rep.holdsBytes():
		rep.Results = []Result{}
	}
	return rep
}

// holdsBytes reports whether the report holds its results as encoded bytes
// (encoded or spill) rather than Results.
func (r *Report) holdsBytes() bool { return r.isJSON || r.isYAML }

// newReport is NewReport with the spill opts asks for.
func newReport(opts Options) *Report {
	rep := NewReport(opts.Format)
	switch opts.Passes {
	case PassesShown:
		rep.failuresOnly, rep.tablePasses = false, rep.isTable
	case PassesOmitted:
		rep.failuresOnly = true
	}
	if rep.holdsBytes() && opts.Destination != nil {
		head, skip := "results:\n", 0
		if rep.isJSON {
			head, skip = jsonHead, 1 // the first element's comma
		}
		if s, err := newInPlace(opts.Destination, head, skip); err == nil {
			rep.spill = s
			if opts.Spilling != nil {
				opts.Spilling()
			}
			return rep
		}
	}
	if (rep.holdsBytes() || rep.junit != nil) && opts.SpillDir != "" {
		// Where no temporary file can be made, the run still works, in
		// memory as it did before spilling.
		s, err := newSpill(opts.SpillDir)
		switch {
		case err != nil:
			return rep
		case rep.junit != nil:
			rep.junit.spill = s
		default:
			rep.spill = s
		}
		if opts.Spilling != nil {
			opts.Spilling()
		}
	}
	return rep
}
