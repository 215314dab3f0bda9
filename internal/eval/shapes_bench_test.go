package eval_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/manifest"
)

// inputShapes are the ways the same pods reach `portal eval`: block YAML
// documents (helm template, kustomize build), the same documents with
// flow-style values, a JSON or YAML List (kubectl get -A -o json|yaml),
// JSON lines and indented JSON objects one after another (jq .items[]).
var inputShapes = []string{"block", "flow", "json-list", "yaml-list", "json-lines", "json-stream"}

// shapeInput writes pods generated pods (BenchmarkEvalThroughput's) in
// shape.
func shapeInput(t testing.TB, shape string, pods int) []byte {
	t.Helper()
	var buf bytes.Buffer
	items := make([]any, 0)
	for i := range pods {
		p := pod(i, 1+i%3, i%10 == 0)
		switch shape {
		case "block":
			buf.WriteString("---\n")
			buf.Write(must(yaml.Marshal(p)))
		case "flow":
			buf.WriteString("---\n")
			for _, k := range slices.Sorted(mapKeys(p)) {
				fmt.Fprintf(&buf, "%s: %s\n", k, flow(p[k]))
			}
		case "json-lines":
			buf.Write(must(json.Marshal(p)))
			buf.WriteByte('\n')
		case "json-stream":
			buf.Write(must(json.MarshalIndent(p, "", "    ")))
			buf.WriteByte('\n')
		case "json-list", "yaml-list":
			items = append(items, p)
		default:
			t.Fatalf("unknown shape %q", shape)
		}
	}
	list := map[string]any{"apiVersion": "v1", "kind": "List", "items": items, "metadata": map[string]any{"resourceVersion": ""}}
	switch shape {
	case "json-list":
		buf.Write(must(json.MarshalIndent(list, "", "    ")))
	case "yaml-list":
		buf.Write(must(yaml.Marshal(list)))
	}
	return buf.Bytes()
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// flow writes v in YAML flow style with plain scalars, as a YAML emitter
// set to flow style does.
func flow(v any) string {
	switch x := v.(type) {
	case map[string]any:
		parts := make([]string, 0, len(x))
		for _, k := range slices.Sorted(mapKeys(x)) {
			parts = append(parts, k+": "+flow(x[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = flow(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case bool:
		return strconv.FormatBool(x)
	}
	panic(fmt.Sprintf("flow: %T", v))
}

// BenchmarkEvalShapes is `portal eval -o json` in the process, from a file
// on disk, on 10,000 pods in each input shape, with one worker and with
// two: reading, splitting, decoding, evaluation and the report spilled to
// a temporary file. PORTAL_EVAL_JOBS sets the job counts
// (comma-separated: 1,2,4,8,16 on a larger machine), PORTAL_EVAL_PODS
// the number of pods and PORTAL_EVAL_SHAPES the shapes (all by default). pods/s is by wall clock; pods/cpu-s divides by the
// process's user+system time, which other load on a shared machine moves
// less (compare shapes by it, job counts by pods/s on an idle machine).
func BenchmarkEvalShapes(b *testing.B) {
	pods := envInts(b, "PORTAL_EVAL_PODS", []int{10_000})[0]
	jobCounts := envInts(b, "PORTAL_EVAL_JOBS", []int{1, 2})
	eng := restrictedEngine(b)
	dir := b.TempDir()
	for _, shape := range inputShapes {
		if only := os.Getenv("PORTAL_EVAL_SHAPES"); only != "" && !slices.Contains(strings.Split(only, ","), shape) {
			continue
		}
		path := filepath.Join(dir, shape+".yaml")
		if err := os.WriteFile(path, shapeInput(b, shape, pods), 0o600); err != nil {
			b.Fatal(err)
		}
		for _, jobs := range jobCounts {
			b.Run(fmt.Sprintf("shape=%s/jobs=%d", shape, jobs), func(b *testing.B) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(jobs))
				cpu0 := cpuTime(b)
				for b.Loop() {
					rep, errs, err := eval.EvaluateStream(context.Background(), eng, manifest.StreamItems([]string{path}, nil),
						eval.Options{Jobs: jobs, Format: "json", SpillDir: dir})
					if err != nil || len(errs) > 0 || rep.Summary.Fail != pods/10 || rep.Objects() != pods {
						b.Fatalf("read error %v, errors %v, %d objects, %d failures", err, errs, rep.Objects(), rep.Summary.Fail)
					}
					rep.Close()
				}
				b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "pods/s")
				b.ReportMetric(float64(pods*b.N)/(cpuTime(b)-cpu0).Seconds(), "pods/cpu-s")
			})
		}
	}
}

// cpuTime is the user and system time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// envInts reads a comma-separated list of numbers from the environment.
func envInts(b *testing.B, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			b.Fatalf("%s: %q is not a positive number", name, f)
		}
		out = append(out, n)
	}
	return out
}
