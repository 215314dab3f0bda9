// Package eval runs rules against manifests offline: the engine behind
// `portal eval`, for CI pipelines that check manifests before they reach a
// cluster.
package eval

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"os"
	"runtime"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/reuse"
)

// Options tunes Evaluate.
type Options struct {
	// Mode limits evaluation to rules with this mode; empty runs every rule.
	Mode core.Mode
	// Jobs is the number of documents decoded and evaluated at once; 0 means
	// GOMAXPROCS. The report is in input order whatever the number.
	Jobs int
	// Cluster is what cross-resource lookups read: manifests given with
	// --cluster-state (a *clustercache.Static). nil: no cluster state.
	Cluster clustercache.Reader
	// Format is the output format the report will be written in. "json",
	// "yaml" and "junit" make the workers encode results as they go and the
	// report keep only the bytes; "table" keeps only the Results that are
	// not passes (the table counts them); any other keeps every Result.
	Format string
	// SpillDir, with Format "json", "yaml" or "junit", is where the report
	// keeps its encoded results: a temporary file there, written as the
	// run goes, so memory does not grow with the number of results; Close
	// removes it. "" keeps them in memory, and so does a directory where
	// no file can be created.
	SpillDir string
	// Destination is the file Report.Write will be given, when it is one
	// (standard output redirected to a file, as CI does). A "json" or
	// "yaml" report whose Destination is a regular file written at its end
	// goes into it as the run decides the results, instead of into a
	// temporary file copied at the end; Close cuts it back to its size
	// before the run unless Write finished the report, so a run that fails
	// still leaves no partial report (a run killed outright does). Any
	// other destination spills as SpillDir says.
	Destination *os.File
	// Passes says which reports list passing results; every report counts
	// them in its summary.
	Passes Passes
	// Spilling, when set, is called once the results are known to go to
	// a file under SpillDir, before the first is evaluated: memory then
	// holds the rules and a few batches, whatever the input's size.
	Spilling func()
}

// Passes is whether a report lists passing results.
type Passes int

const (
	// PassesByFormat lists them in "json", "yaml" and "junit" reports,
	// which are read by programs, and not in the table, which a human acts
	// on.
	PassesByFormat Passes = iota
	// PassesShown lists them in every format.
	PassesShown
	// PassesOmitted lists them in none: a report of a large input is
	// mostly passes (99% of the JSON report of 100,000 pods of which a
	// tenth fail the pod-security bundle), which CI systems only count.
	PassesOmitted
)

// Run evaluates every document against the engine's rules, one at a time.
// Documents that cannot be read are returned as errors; the report covers the
// rest.
func Run(eng *engine.Engine, docs []manifest.Document, mode core.Mode) (*Report, []error) {
	return Evaluate(context.Background(), eng, docs, Options{Mode: mode, Jobs: 1})
}

// batchSize is how many documents a worker takes at once: enough to make the
// hand-off cheap next to evaluation, few enough to keep every core busy
// until the end of a small input.
const batchSize = 32

// batch is the outcome of evaluating in, a few consecutive inputs.
type batch struct {
	in input
	// seq is the batch's place in the input (inOrder).
	seq int
	// encodedHint sizes the JSON buffer: what the worker's previous batch
	// took, so the buffer rarely grows (each growth copies it).
	encodedHint int
	results     []Result
	encoded     []byte
	summary     Summary
	objects     int
	denied      bool
	errs        []error
	// junit holds the results encoded as test cases, for a JUnit report.
	junit *junitCases
	// matched holds the names of the rules that gave a result.
	matched map[string]struct{}
	// scratch is the worker's slice the engine writes each object's
	// results into (engine.EvaluateAppend); the worker takes it back
	// before the batch goes to the merge.
	scratch []core.Result
}

// Evaluate is Run with options: opts.Jobs workers decode and evaluate
// documents, and their results are merged in input order, so the report and
// the errors read the same whatever the number of workers. At most a few
// batches per worker are in flight, so memory holds the input, the report and
// a bounded number of decoded objects. When ctx ends, the remaining documents
// are skipped and the report is incomplete: check ctx.Err().
func Evaluate(ctx context.Context, eng *engine.Engine, docs []manifest.Document, opts Options) (*Report, []error) {
	return evaluate(ctx, eng, documents(docs), opts)
}

// EvaluateObjects is Evaluate on decoded objects, such as a page of a live
// cluster's objects; an evaluation error names the object.
func EvaluateObjects(ctx context.Context, eng *engine.Engine, objs []*unstructured.Unstructured, opts Options) (*Report, []error) {
	return evaluate(ctx, eng, objects(objs), opts)
}

// input is what a run evaluates: documents to decode, or objects.
type input interface {
	len() int
	// sub is the inputs lo to hi.
	sub(lo, hi int) input
	// objects decodes the i-th input into the objects it holds, into the
	// maps and lists of r where it decodes (r may be nil). reused reports
	// whether the caller is to hand the objects back to r when done.
	objects(i int, r *reuse.Pool) (objs []*unstructured.Unstructured, reused bool, err error)
	// errorf locates an evaluation error of the i-th input.
	errorf(i int, err error) error
}

type documents []manifest.Document

func (d documents) len() int             { return len(d) }
func (d documents) sub(lo, hi int) input { return d[lo:hi] }
func (d documents) objects(i int, r *reuse.Pool) ([]*unstructured.Unstructured, bool, error) {
	objs, err := d[i].ObjectsReusing(r)
	return objs, true, err
}
func (d documents) errorf(i int, err error) error { return d[i].Errorf("%v", err) }

type objects []*unstructured.Unstructured

func (o objects) len() int             { return len(o) }
func (o objects) sub(lo, hi int) input { return o[lo:hi] }
func (o objects) objects(i int, _ *reuse.Pool) ([]*unstructured.Unstructured, bool, error) {
	return o[i : i+1], false, nil
}
func (o objects) errorf(i int, err error) error {
	return fmt.Errorf("%s %s: %w", o[i].GetKind(), objectName(o[i]), err)
}

func objectName(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

func evaluate(ctx context.Context, eng *engine.Engine, in input, opts Options) (*Report, []error) {
	n := in.len()
	if n <= batchSize {
		// One batch: workers would only cost their start.
		opts.Jobs = 1
	}
	rep, errs, _ := evaluateBatches(ctx, eng, opts, func(emit func(input) bool) error {
		for lo := 0; lo < n; lo += batchSize {
			if !emit(in.sub(lo, min(lo+batchSize, n))) {
				break
			}
		}
		return nil
	})
	return rep, errs
}

// EvaluateStream is Evaluate on documents read as the run goes (see
// manifest.Stream): each batch of documents is let go once evaluated, so
// memory holds the batches in flight, not the input. A read error stops the
// run and is returned as err; the report is then incomplete and must not be
// written.
func EvaluateStream(ctx context.Context, eng *engine.Engine, docs iter.Seq2[manifest.Document, error], opts Options) (rep *Report, errs []error, err error) {
	return evaluateBatches(ctx, eng, opts, func(emit func(input) bool) error {
		var cur documents
		for d, err := range docs {
			if err != nil {
				return err
			}
			if cur = append(cur, d); len(cur) == batchSize {
				if !emit(cur) {
					return nil
				}
				cur = make(documents, 0, batchSize)
			}
		}
		if len(cur) > 0 {
			emit(cur)
		}
		return nil
	})
}

// evaluateBatches evaluates the batches produce emits, in order, with
// opts.Jobs workers, and merges their results in that order. emit reports
// false once ctx has ended: produce should stop. produce's error is
// returned as the third value.
func evaluateBatches(ctx context.Context, eng *engine.Engine, opts Options, produce func(emit func(input) bool) error) (*Report, []error, error) {
	jobs := opts.Jobs
	if jobs <= 0 {
		jobs = runtime.GOMAXPROCS(0)
	}
	// ahead bounds the batches read ahead of the merge: four batches a
	// worker, so one slow batch (a collection's assist, a large object)
	// holds up the others less (at two, the reader waited a third of a
	// second per 100,000 pods with two workers, and they for it).
	ahead := 4 * jobs
	m := &merger{rep: newReport(opts)}
	// A spilled batch's buffer is copied to the file at once: it goes back
	// to the workers instead of to the collector (a batch's JSON or YAML
	// is most of what evaluating it allocates). Each batch read and not
	// yet merged holds at most one buffer (one too small for it is
	// replaced, and the old one dropped), and at most ahead such batches
	// have taken one, so free has room for every buffer there is: with
	// room for fewer, two jobs dropped and made again a quarter of their
	// 200 KB buffers, 50 MB a 100,000 pods.
	if m.rep.spill != nil && (m.rep.isJSON || m.rep.isYAML) {
		m.free = make(chan []byte, ahead)
	}
	w := worker{ctx: ctx, eng: eng, opts: engine.Options{Mode: opts.Mode}, json: m.rep.isJSON, yaml: m.rep.isYAML, junit: m.rep.junit != nil,
		keep: m.rep.spill == nil, dropPasses: m.rep.failuresOnly}
	var err error
	if jobs == 1 {
		err = evaluateInLine(ctx, w, m, produce)
	} else {
		err = evaluateInWorkers(ctx, w, m, jobs, ahead, produce)
	}
	return m.rep, m.errs, err
}

// merger folds evaluated batches into the report, one at a time and in
// read order, and hands their buffers back to the workers.
type merger struct {
	rep  *Report
	errs []error
	free chan []byte
}

func (m *merger) merge(b *batch) {
	rep := m.rep
	rep.objects += b.objects
	rep.denied = rep.denied || b.denied
	rep.Summary.add(b.summary)
	rep.Results = append(rep.Results, b.results...)
	rep.addMatched(b.matched)
	if len(b.encoded) > 0 {
		rep.addEncoded(b.encoded)
	}
	if m.free != nil && cap(b.encoded) > 0 {
		select {
		case m.free <- b.encoded[:0]:
		default:
		}
	}
	if b.junit != nil {
		rep.junit.add(b.junit)
	}
	m.errs = append(m.errs, b.errs...)
}

// evaluateInLine evaluates and merges each batch as produce emits it, on
// the calling goroutine: one job hands nothing over.
func evaluateInLine(ctx context.Context, w worker, m *merger, produce func(emit func(input) bool) error) error {
	w.opts.Reuse, w.elems = new(reuse.Pool), new(elemCache)
	var results []Result
	var scratch []core.Result
	hint := 0
	return produce(func(in input) bool {
		b := &batch{in: in, results: results[:0], encodedHint: hint, encoded: fromFree(m.free), scratch: scratch}
		w.run(b)
		results, hint = b.results, len(b.encoded)+len(b.encoded)/8
		scratch, b.scratch = b.scratch, nil
		m.merge(b)
		return ctx.Err() == nil
	})
}

// evaluateInWorkers reads on one goroutine and evaluates on jobs workers;
// the worker that finishes the batch next in read order merges it (and
// every later one ready), so merging needs no goroutine of its own.
func evaluateInWorkers(ctx context.Context, w worker, m *merger, jobs, ahead int, produce func(emit func(input) bool) error) error {
	order := newInOrder(ahead, m.merge)
	// work holds up to a batch per worker read ahead, within ahead: a
	// worker done with a batch takes the next without waiting for the
	// reader to be scheduled (it is woken onto the core of a busy worker).
	work := make(chan *batch, jobs)
	var produceErr error
	go func() {
		defer close(work)
		// Read below only once the workers, which end after work is
		// closed, have.
		produceErr = produce(func(in input) bool {
			b := &batch{in: in}
			order.admit(b)
			work <- b
			return ctx.Err() == nil
		})
	}()
	var wg sync.WaitGroup
	for range jobs {
		w := w
		w.opts.Reuse, w.elems = new(reuse.Pool), new(elemCache)
		wg.Go(func() {
			hint := 0
			var scratch []core.Result
			for b := range work {
				b.encodedHint, b.encoded, b.scratch = hint, fromFree(m.free), scratch
				w.run(b)
				hint = len(b.encoded) + len(b.encoded)/8
				scratch, b.scratch = b.scratch, nil
				order.done(b)
			}
		})
	}
	wg.Wait()
	return produceErr
}

// fromFree is a buffer from free, if one is there (nil otherwise).
func fromFree(free chan []byte) []byte {
	select {
	case b := <-free:
		return b
	default:
		return nil
	}
}

type worker struct {
	ctx  context.Context
	eng  *engine.Engine
	opts engine.Options
	json bool
	// yaml and junit: the worker encodes a batch's results once it is
	// evaluated, in the report's format.
	yaml, junit bool
	// keep: the report keeps the batches' buffers (it does not spill).
	keep bool
	// dropPasses: passes are counted, not listed (see Report.failuresOnly).
	dropPasses bool
	// elems encodes the JSON results; each worker has its own.
	elems *elemCache
}

// encodedBatchCap is the smallest first buffer for a batch's JSON.
const encodedBatchCap = 16 << 10

func (w *worker) run(b *batch) {
	defer func() {
		w.encode(b)
		// The report keeps the buffer until the end: give back what a batch
		// of few results did not use (after encode, which sizes a YAML
		// batch's buffer for the results it may hold).
		if w.keep && cap(b.encoded) > 2*len(b.encoded) {
			b.encoded = bytes.Clone(b.encoded)
		}
	}()
	for i := range b.in.len() {
		if w.ctx.Err() != nil {
			// Interrupted: the caller reports ctx's error, not a report.
			return
		}
		objs, reused, err := b.in.objects(i, w.opts.Reuse)
		if err != nil {
			b.errs = append(b.errs, err)
			continue
		}
		b.objects += len(objs)
		for _, obj := range objs {
			results, err := w.eng.EvaluateAppend(w.ctx, obj, w.opts, b.scratch)
			if results != nil {
				b.scratch = results
			}
			if err != nil {
				b.errs = append(b.errs, b.in.errorf(i, err))
				continue
			}
			for i := range results {
				b.add(&results[i], w.json, w.dropPasses, w.elems)
			}
			if reused {
				// The results hold strings, never the object's maps.
				w.opts.Reuse.Release(obj.Object)
			}
		}
	}
}

// encode turns the results of an evaluated batch into the bytes of the
// report's format, in the worker, so that the merge only appends them.
func (w *worker) encode(b *batch) {
	if len(b.results) == 0 || (!w.yaml && !w.junit) {
		return
	}
	var err error
	if w.yaml {
		b.encoded, err = yamlEntries(b.encoded[:0], b.results)
	} else {
		b.junit, err = encodeJUnit(b.results)
	}
	if err != nil {
		b.errs = append(b.errs, fmt.Errorf("encode the report: %w", err))
	}
	b.results = nil
}

func (b *batch) add(res *core.Result, encode, dropPasses bool, elems *elemCache) {
	if _, ok := b.matched[res.Rule.Name]; !ok {
		if b.matched == nil {
			b.matched = map[string]struct{}{}
		}
		b.matched[res.Rule.Name] = struct{}{}
	}
	switch res.Outcome {
	case core.OutcomePass:
		b.summary.Pass++
	case core.OutcomeFail:
		b.summary.Fail++
	case core.OutcomeError:
		b.summary.Error++
	case core.OutcomeSkip:
		b.summary.Skip++
	}
	r := Result{
		Resource: Resource{
			APIVersion: res.Resource.APIVersion,
			Kind:       res.Resource.Kind,
			Namespace:  res.Resource.Namespace,
			Name:       res.Resource.Name,
		},
		Rule:              res.Rule.Name,
		Severity:          string(res.Rule.Severity),
		Category:          res.Rule.Category,
		EnforcementAction: string(res.Rule.EnforcementAction),
		Result:            string(res.Outcome),
		Container:         res.Container,
		Message:           res.Message,
		denies:            res.Denies(),
	}
	if res.Exception != nil {
		r.Exception = res.Exception.String()
	}
	b.denied = b.denied || r.denies
	if dropPasses && res.Outcome == core.OutcomePass {
		return
	}
	if encode {
		if want := max(b.encodedHint, encodedBatchCap); cap(b.encoded) < want {
			b.encoded = make([]byte, 0, want)
		}
		b.encoded = elems.append(b.encoded, &r, res.Rule)
		return
	}
	b.results = append(b.results, r)
}
