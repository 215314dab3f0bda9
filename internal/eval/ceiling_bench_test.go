package eval_test

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/manifest"
)

// BenchmarkJobsCeiling reads how far this machine lets --jobs go, so that
// the speed-up of N jobs is read against what N cores give here rather
// than against N. In the same rounds, on BenchmarkEvalThroughput's pods
// (10,000, or PORTAL_EVAL_PODS) already split into documents in memory,
// each reported as JSON to a temporary file as `portal eval -o json`
// does, it times:
//
//   - one run with one job;
//   - N such runs side by side in N goroutines, each on all the pods:
//     nothing shared but the engine, the heap and the cores;
//   - one run with N jobs: the hand-off of batches to the workers and the
//     merge in input order. Reading and cutting a file (EvaluateStream's
//     reader) is not in it: BenchmarkEvalCLI has the whole process.
//
// N is GOMAXPROCS (-cpu). alone-x is the first speed-up, jobs-x the second
// and of-ceiling their quotient: what the pipeline loses itself. The
// runs side by side each build a report of their own, so they are a
// reference more than a strict bound (of-ceiling can pass 1). Each phase
// starts after a collection, and the order of the three alternates from
// round to round. Medians over the rounds.
func BenchmarkJobsCeiling(b *testing.B) {
	n := runtime.GOMAXPROCS(0)
	eng := restrictedEngine(b)
	pods := envInts(b, "PORTAL_EVAL_PODS", []int{10_000})[0]
	docs := manifest.Split("pods.yaml", shapeInput(b, "block", pods))
	dir := b.TempDir()
	run := func(jobs int) {
		rep, errs := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: jobs, Format: "json", SpillDir: dir})
		if len(errs) > 0 || rep.Summary.Fail != pods/10 {
			b.Errorf("errors %v, %d failures, want %d", errs, rep.Summary.Fail, pods/10)
		}
		if err := rep.Close(); err != nil {
			b.Error(err)
		}
	}
	timed := func(f func()) float64 {
		start := time.Now()
		f()
		return time.Since(start).Seconds()
	}
	var alone, jobs []float64
	for round := 0; b.Loop(); round++ {
		var one, side, all float64
		phases := []func(){
			func() { one = timed(func() { run(1) }) },
			func() {
				side = timed(func() {
					var wg sync.WaitGroup
					for range n {
						wg.Go(func() { run(1) })
					}
					wg.Wait()
				})
			},
			func() { all = timed(func() { run(n) }) },
		}
		if round%2 == 1 {
			slices.Reverse(phases)
		}
		for _, phase := range phases {
			runtime.GC()
			phase()
		}
		alone = append(alone, float64(n)*one/side)
		jobs = append(jobs, one/all)
	}
	a, j := median(alone), median(jobs)
	b.ReportMetric(a, "alone-x")
	b.ReportMetric(j, "jobs-x")
	b.ReportMetric(j/a, "of-ceiling")
	b.ReportMetric(0, "ns/op")
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}
