package eval_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// BenchmarkEvalCLIMemory is the peak RSS of `portal eval` (the built
// binary, a child process) on a `kubectl get pods -A -o json` List of
// 10,000 and 100,000 generated pods (BenchmarkEvalThroughput's), in each
// output format: what a CI job must give it. PORTAL_EVAL_MEM_PODS sets the
// counts (comma-separated, 1000000 for a million). One run each: RSS is
// not a timing, and a large input takes minutes.
func BenchmarkEvalCLIMemory(b *testing.B) {
	counts := envInts(b, "PORTAL_EVAL_MEM_PODS", []int{10_000, 100_000})
	dir := b.TempDir()
	bin, _, rules := cliSetup(b, dir, 10)
	for _, pods := range counts {
		input := filepath.Join(dir, fmt.Sprintf("pods-%d.json", pods))
		writeList(b, input, pods)
		for _, format := range []string{"json", "yaml", "junit", "table"} {
			b.Run(fmt.Sprintf("pods=%d/o=%s", pods, format), func(b *testing.B) {
				var peak int64
				for b.Loop() {
					cmd := exec.Command(bin, "eval", "--rules", rules, "--file", input, "-o", format)
					out, err := os.Create(filepath.Join(dir, "report"))
					if err != nil {
						b.Fatal(err)
					}
					cmd.Stdout = out
					var stderr strings.Builder
					cmd.Stderr = &stderr
					err = cmd.Run()
					out.Close()
					if code := cmd.ProcessState.ExitCode(); code != 1 {
						b.Fatalf("portal eval exit %d (%v), want 1: %s", code, err, stderr.String())
					}
					peak = max(peak, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)
				}
				b.ReportMetric(float64(peak)/1024, "peak-RSS-MB")
			})
		}
	}
}

// writeList writes pods generated pods as one JSON List, as kubectl does,
// without holding them.
func writeList(b *testing.B, path string, pods int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	w.WriteString(`{"apiVersion": "v1", "items": [`)
	for i := range pods {
		if i > 0 {
			w.WriteString(",\n")
		}
		data, err := json.Marshal(pod(i, 1+i%3, i%10 == 0))
		if err != nil {
			b.Fatal(err)
		}
		w.Write(data)
	}
	w.WriteString("], \"kind\": \"List\", \"metadata\": {\"resourceVersion\": \"\"}}\n")
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}
