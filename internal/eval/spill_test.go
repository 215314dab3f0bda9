package eval_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/manifest"
)

// TestSpilledReportIsTheSame: a JSON or JUnit report whose results wait in
// a temporary file reads byte for byte as the one kept in memory, with one
// worker or several, empty or not, to a writer or to a file (the kernel
// copies the spill there), and leaves no file behind.
func TestSpilledReportIsTheSame(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 300, 5))
	for _, format := range []string{"json", "junit"} {
		for _, n := range []int{0, 1, len(docs)} {
			want, _ := eval.Evaluate(context.Background(), eng, docs[:n], eval.Options{Jobs: 1, Format: format})
			for _, jobs := range []int{1, 3} {
				spilledIsTheSame(t, eng, docs[:n], format, jobs, render(t, want, format))
			}
		}
	}
}

func spilledIsTheSame(t *testing.T, eng *engine.Engine, docs []manifest.Document, format string, jobs int, want string) {
	t.Helper()
	n := len(docs)
	dir := t.TempDir()
	rep, _ := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: jobs, Format: format, SpillDir: dir})
	// The file is unlinked at once: a killed run leaves nothing.
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("%s, %d documents, %d jobs: %d files in the spill directory during the run", format, n, jobs, len(left))
	}
	got := render(t, rep, format)
	if got != want {
		t.Fatalf("%s, %d documents, %d jobs: the spilled report differs\n got: %.1000s", format, n, jobs, got)
	}
	if again := render(t, rep, format); again != got {
		t.Fatalf("%s, %d documents, %d jobs: a second write differs", format, n, jobs)
	}
	// To a file, the spill is copied by the kernel, from the file's own
	// offset: the same bytes, every time.
	for range 2 {
		if inFile := writeFile(t, rep, format); inFile != got {
			t.Fatalf("%s, %d documents, %d jobs: the report written to a file differs\n got: %.1000s", format, n, jobs, inFile)
		}
	}
	if err := rep.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rep.Write(io.Discard, format); err == nil {
		t.Fatalf("%s: a closed report was written", format)
	}
}

// TestSpillDirUnusableKeepsResultsInMemory: where no temporary file can be
// made, the run still reports everything.
func TestSpillDirUnusableKeepsResultsInMemory(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 20))
	want, _ := eval.Evaluate(context.Background(), eng, docs, eval.Options{Format: "json"})
	rep, _ := eval.Evaluate(context.Background(), eng, docs, eval.Options{Format: "json", SpillDir: filepath.Join(t.TempDir(), "missing")})
	defer rep.Close()
	if render(t, rep, "json") != render(t, want, "json") {
		t.Fatal("the report differs without a spill directory")
	}
}

// TestSpilledReportHoldsNoResults: the memory a spilled JSON report keeps
// does not grow with its results, which the in-memory report holds.
func TestSpilledReportHoldsNoResults(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 2000))
	held := func(o eval.Options) (heap uint64, size int) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rep, errs := eval.Evaluate(context.Background(), eng, docs, o)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		size = len(render(t, rep, o.Format))
		runtime.KeepAlive(rep)
		if err := rep.Close(); err != nil {
			t.Fatal(err)
		}
		return max(after.HeapAlloc, before.HeapAlloc) - before.HeapAlloc, size
	}
	for _, format := range []string{"json", "yaml", "junit"} {
		inMemory, size := held(eval.Options{Jobs: 2, Format: format})
		spilled, _ := held(eval.Options{Jobs: 2, Format: format, SpillDir: t.TempDir()})
		t.Logf("%s: a %d-byte report: %d bytes held in memory, %d spilled", format, size, inMemory, spilled)
		if inMemory < uint64(size)/2 {
			t.Fatalf("%s: the in-memory report holds %d bytes of a %d-byte report: the comparison measures nothing", format, inMemory, size)
		}
		// JUnit holds up to a block of cases per rule (19 here, 16 KiB
		// in buffers of up to twice that) before it writes it: a bound
		// that does not grow with the input.
		slack := uint64(0)
		if format == "junit" {
			slack = 19 * 32 << 10
		}
		if spilled > uint64(size)/20+slack {
			t.Fatalf("%s: the spilled report holds %d bytes of a %d-byte report", format, spilled, size)
		}
	}
}

// TestTableReportKeepsNoPasses: a report evaluated for the table keeps
// only the rows the table shows, prints the same table as one that kept
// everything, and refuses the formats that list passes.
func TestTableReportKeepsNoPasses(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 200))
	all, _ := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 2})
	for _, jobs := range []int{1, 2} {
		table, _ := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: jobs, Format: "table"})
		for _, r := range table.Results {
			if r.Result == "pass" {
				t.Fatalf("%d jobs: a pass kept for the table: %+v", jobs, r)
			}
		}
		if len(table.Results) == 0 || table.Summary != all.Summary {
			t.Fatalf("%d jobs: %d rows, summary %+v; want some rows and %+v", jobs, len(table.Results), table.Summary, all.Summary)
		}
		if render(t, table, "table") != render(t, all, "table") {
			t.Fatalf("%d jobs: the table differs", jobs)
		}
		for _, format := range []string{"json", "yaml", "junit"} {
			if err := table.Write(io.Discard, format); err == nil {
				t.Fatalf("a table-only report was written as %s", format)
			}
		}
	}
}

// writeFile writes rep to a file, as `portal eval > report.json` does, and
// returns what the file holds.
func writeFile(t *testing.T, rep *eval.Report, format string) string {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "report"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("prefix:"); err != nil {
		t.Fatal(err)
	}
	if err := rep.Write(f, format); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(string(data), "prefix:")
}

// TestReportWrittenInPlace: a JSON or YAML report whose destination is a
// regular file goes into it as the run goes, and reads byte for byte as the
// report kept in memory, after what the file held, with one worker or
// several, empty or not. A run not finished (a manifest that does not
// parse, an interrupt) cuts the file back to what it held before.
func TestReportWrittenInPlace(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 300, 5))
	const before = "what the file held\n"
	for _, format := range []string{"json", "yaml"} {
		for _, n := range []int{0, 1, len(docs)} {
			want, _ := eval.Evaluate(context.Background(), eng, docs[:n], eval.Options{Jobs: 1, Format: format})
			for _, jobs := range []int{1, 3} {
				for _, finish := range []bool{true, false} {
					f := fileHolding(t, before)
					rep, _ := eval.Evaluate(context.Background(), eng, docs[:n], eval.Options{Jobs: jobs, Format: format, SpillDir: t.TempDir(), Destination: f})
					if n == len(docs) {
						// Past the write buffer: the results are in the file
						// before the report is written.
						if fi, err := f.Stat(); err != nil || fi.Size() < 1<<20 {
							t.Fatalf("%s, %d jobs: the destination holds %d bytes during the run (%v), want the results", format, jobs, fi.Size(), err)
						}
					}
					if err := rep.Write(io.Discard, format); err == nil {
						t.Fatalf("%s: a report written in place was written to another writer", format)
					}
					if finish {
						if err := rep.Write(f, format); err != nil {
							t.Fatal(err)
						}
						if err := rep.Write(f, format); err == nil {
							t.Fatalf("%s: a report written in place was written twice", format)
						}
					}
					if err := rep.Close(); err != nil {
						t.Fatal(err)
					}
					wantFile := before
					if finish {
						wantFile += render(t, want, format)
					}
					if got := contentsOf(t, f); got != wantFile {
						t.Fatalf("%s, %d documents, %d jobs, finished %v: the file holds\n%.1000s\nwant\n%.1000s", format, n, jobs, finish, got, wantFile)
					}
				}
			}
		}
	}
}

// TestReportInPlaceOnlyAtTheEnd: a destination not written at its end (a
// shell's ">>" opens a file with its offset at 0) gets the report as
// before, copied at the end after what it held.
func TestReportInPlaceOnlyAtTheEnd(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 30, 5))
	want, _ := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 1, Format: "json"})
	f := fileHolding(t, "held\n")
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	rep, _ := eval.Evaluate(context.Background(), eng, docs, eval.Options{Format: "json", SpillDir: t.TempDir(), Destination: f})
	defer rep.Close()
	if got := render(t, rep, "json"); got != render(t, want, "json") {
		t.Fatalf("the report differs\n got: %.1000s", got)
	}
	if got := contentsOf(t, f); got != "held\n" {
		t.Fatalf("the destination was written during the run: %q", got)
	}
}

// fileHolding is a file holding s, open for writing at its end.
func fileHolding(t *testing.T, s string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "report"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	return f
}

func contentsOf(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
