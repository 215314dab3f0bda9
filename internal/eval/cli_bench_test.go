package eval_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// BenchmarkEvalCLI is `portal eval -o json` end to end, as CI runs it: the
// built binary started as a child process on BenchmarkEvalThroughput's 10,000
// pods in one file, against the restricted bundle, writing the report to a
// file. Process start, rule loading, reading, decoding, evaluation and the
// 190,000 results are all in the time. jobs=1 runs the child with
// GOMAXPROCS=1 (one core); jobs=all with every core.
//
// pods/s is by wall clock; pods/cpu-s divides by the child's user+system
// time, which other load on the machine moves less.
//
// For machines without a Go toolchain (a lent 16-core box): PORTAL_EVAL_BIN
// names a portal binary to run instead of building one, PORTAL_EVAL_PODS the
// pods in the file and PORTAL_EVAL_JOBS the job counts (each run with that
// GOMAXPROCS).
func BenchmarkEvalCLI(b *testing.B) {
	pods := envInts(b, "PORTAL_EVAL_PODS", []int{10_000})[0]
	// PORTAL_EVAL_BENCH_DIR keeps the binary and pods.yaml, to time them
	// with other tools.
	dir := os.Getenv("PORTAL_EVAL_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	bin, input, rules := cliSetup(b, dir, pods)
	for _, jobs := range envInts(b, "PORTAL_EVAL_JOBS", []int{1, runtime.NumCPU()}) {
		name := fmt.Sprintf("jobs=%d", jobs)
		if jobs > 1 && jobs == runtime.NumCPU() {
			name = fmt.Sprintf("jobs=all(%d)", jobs)
		}
		b.Run(name, func(b *testing.B) {
			report := filepath.Join(dir, "report.json")
			var cpu time.Duration
			for b.Loop() {
				// The last run's report goes outside the time: truncating
				// 644 MB (100,000 pods) is 0.2 to 0.3 s of the kernel's,
				// a fifth of a 16-job run, and no part of this one.
				b.StopTimer()
				if err := os.Remove(report); err != nil && !os.IsNotExist(err) {
					b.Fatal(err)
				}
				b.StartTimer()
				out, err := os.Create(report)
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command(bin, "eval", "--rules", rules, "--file", input, "-o", "json", "--jobs", fmt.Sprint(jobs))
				cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", jobs))
				cmd.Stdout = out
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				err = cmd.Run()
				out.Close()
				// Exit 1: the tenth of the pods that violate the bundle.
				if code := cmd.ProcessState.ExitCode(); code != 1 {
					b.Fatalf("portal eval exit %d (%v), want 1: %s", code, err, stderr.String())
				}
				cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			}
			b.StopTimer()
			checkReport(b, report, pods)
			b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "pods/s")
			b.ReportMetric(float64(pods*b.N)/cpu.Seconds(), "pods/cpu-s")
		})
	}
}

// cliSetup builds portal into dir and writes the generated pods there. rules
// is the restricted bundle as one comma-separated --rules value.
func cliSetup(b *testing.B, dir string, pods int) (bin, input, rules string) {
	b.Helper()
	bin = os.Getenv("PORTAL_EVAL_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "portal")
		build := exec.Command("go", "build", "-o", bin, "./cmd/portal")
		build.Dir = filepath.Join("..", "..")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build: %v\n%s", err, out)
		}
	}
	input = filepath.Join(dir, "pods.yaml")
	if err := os.WriteFile(input, stream(b, pods), 0o600); err != nil {
		b.Fatal(err)
	}
	bundle, err := filepath.Abs(filepath.Join("..", "..", "examples", "rules", "pod-security"))
	if err != nil {
		b.Fatal(err)
	}
	return bin, input, filepath.Join(bundle, "baseline") + "," + filepath.Join(bundle, "restricted")
}

// checkReport makes sure the benchmark measured a full report: one failure
// per violating pod, and results for every pod.
func checkReport(b *testing.B, path string, pods int) {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var rep struct {
		Results []json.RawMessage `json:"results"`
		Summary struct{ Pass, Fail, Error int }
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		b.Fatalf("report is not JSON: %v", err)
	}
	if rep.Summary.Fail != pods/10 || rep.Summary.Error != 0 || len(rep.Results) < pods*19 {
		b.Fatalf("report: %+v, %d results", rep.Summary, len(rep.Results))
	}
}
