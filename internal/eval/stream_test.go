package eval_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/manifest"
)

func seq(docs []manifest.Document, tail error) iter.Seq2[manifest.Document, error] {
	return func(yield func(manifest.Document, error) bool) {
		for _, d := range docs {
			if !yield(d, nil) {
				return
			}
		}
		if tail != nil {
			yield(manifest.Document{}, tail)
		}
	}
}

// TestEvaluateStreamIsEvaluate: evaluating documents as they are read
// gives, in every format and with any number of workers, the report and
// the errors of evaluating them all at once.
func TestEvaluateStreamIsEvaluate(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 500, 7, 333))
	for _, format := range eval.Formats {
		want, wantErrs := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 1, Format: format})
		for _, jobs := range []int{1, 4} {
			rep, errs, err := eval.EvaluateStream(context.Background(), eng, seq(docs, nil), eval.Options{Jobs: jobs, Format: format, SpillDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(errs) != fmt.Sprint(wantErrs) || rep.Objects() != want.Objects() || rep.Denied() != want.Denied() {
				t.Fatalf("%s, %d jobs: errors %v, %d objects; want %v, %d", format, jobs, errs, rep.Objects(), wantErrs, want.Objects())
			}
			if render(t, rep, format) != render(t, want, format) {
				t.Fatalf("%s, %d jobs: the streamed report differs", format, jobs)
			}
			rep.Close()
		}
	}
}

// TestEvaluateStreamReadError: a read error in the middle of the input is
// returned, with one worker or several, and nothing hangs.
func TestEvaluateStreamReadError(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 100))
	broken := errors.New("read pods.yaml: disk on fire")
	for _, jobs := range []int{1, 3} {
		rep, _, err := eval.EvaluateStream(context.Background(), eng, seq(docs, broken), eval.Options{Jobs: jobs})
		if !errors.Is(err, broken) {
			t.Fatalf("%d jobs: error %v, want the read error", jobs, err)
		}
		rep.Close()
	}
}

// TestEvaluateStreamLetsDocumentsGo: the documents already evaluated are
// not kept, so memory holds a few batches of the input, not all of it. A
// generator makes 6,000 pods; at the 5,000th, most of those before it must
// have been collected.
func TestEvaluateStreamLetsDocumentsGo(t *testing.T) {
	eng := restrictedEngine(t)
	const n, check = 6000, 5000
	var yielded, collected atomic.Int64
	var live int64
	docs := func(yield func(manifest.Document, error) bool) {
		for i := range n {
			if i == check {
				runtime.GC()
				// Cleanups run after the collection, on their own goroutine.
				_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
					runtime.GC()
					return yielded.Load()-collected.Load() < check/4, nil
				})
				live = yielded.Load() - collected.Load()
			}
			data, err := yaml.Marshal(pod(i, 2, i%10 == 0))
			if err != nil {
				yield(manifest.Document{}, err)
				return
			}
			runtime.AddCleanup(&data[0], func(*atomic.Int64) { collected.Add(1) }, &collected)
			yielded.Add(1)
			if !yield(manifest.Document{Path: "gen.yaml", Line: i + 1, Data: data}, nil) {
				return
			}
		}
	}
	rep, errs, err := eval.EvaluateStream(context.Background(), eng, docs, eval.Options{Jobs: 2, Format: "json", SpillDir: t.TempDir()})
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	defer rep.Close()
	if rep.Objects() != n {
		t.Fatalf("%d objects, want %d", rep.Objects(), n)
	}
	if live >= check/4 {
		t.Fatalf("%d of the first %d documents still held", live, check)
	}
	t.Logf("%d of the first %d documents still held at the %dth", live, check, check)
}
