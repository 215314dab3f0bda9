package eval_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

var restricted = []string{
	filepath.Join("..", "..", "examples", "rules", "pod-security", "baseline"),
	filepath.Join("..", "..", "examples", "rules", "pod-security", "restricted"),
}

func restrictedEngine(b testing.TB) *engine.Engine {
	b.Helper()
	eng := engine.New(exprlang.New())
	rules, errs := rule.LoadPaths(eng, restricted)
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	eng.SetRules(rules)
	return eng
}

// pod returns a restricted-compliant pod with n containers; when violating,
// its first container is privileged.
func pod(i, n int, violating bool) map[string]any {
	containers := make([]any, n)
	for c := range containers {
		sc := map[string]any{
			"allowPrivilegeEscalation": false,
			"runAsNonRoot":             true,
			"capabilities":             map[string]any{"drop": []any{"ALL"}},
			"seccompProfile":           map[string]any{"type": "RuntimeDefault"},
		}
		if violating && c == 0 {
			sc["privileged"] = true
		}
		containers[c] = map[string]any{
			"name": fmt.Sprintf("c%d", c), "image": fmt.Sprintf("ghcr.io/acme/app-%d:1.%d", c, i%10),
			"ports":           []any{map[string]any{"containerPort": int64(8080 + c)}},
			"securityContext": sc,
		}
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": fmt.Sprintf("pod-%d", i), "namespace": "bench", "labels": map[string]any{"app": "bench"}},
		"spec": map[string]any{
			"securityContext": map[string]any{"runAsNonRoot": true, "seccompProfile": map[string]any{"type": "RuntimeDefault"}},
			"containers":      containers,
			"volumes":         []any{map[string]any{"name": "tmp", "emptyDir": map[string]any{}}},
		},
	}
}

// BenchmarkRestrictedBundle evaluates the PSS restricted bundle (baseline and
// restricted rules) on one pod. It reports the median and 99th percentile of
// single evaluations besides the mean.
func BenchmarkRestrictedBundle(b *testing.B) {
	eng := restrictedEngine(b)
	for _, n := range []int{1, 3, 10} {
		b.Run(fmt.Sprintf("containers=%d", n), func(b *testing.B) {
			obj := &unstructured.Unstructured{Object: pod(0, n, false)}
			var samples []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				res, err := eng.Evaluate(context.Background(), obj, engine.Options{Mode: core.ModeAdmission})
				samples = append(samples, time.Since(start))
				if err != nil || len(res) == 0 {
					b.Fatalf("evaluate: %v (%d results)", err, len(res))
				}
			}
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}

// BenchmarkEvalThroughput is `portal eval` without the file system: 10,000
// generated pod manifests (one in ten violating) in one multi-document YAML
// stream, split, decoded and evaluated against the restricted bundle.
func BenchmarkEvalThroughput(b *testing.B) {
	const pods = 10_000
	eng := restrictedEngine(b)
	var stream bytes.Buffer
	for i := range pods {
		y, err := yaml.Marshal(pod(i, 1+i%3, i%10 == 0))
		if err != nil {
			b.Fatal(err)
		}
		stream.WriteString("---\n")
		stream.Write(y)
	}
	data := stream.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		docs := manifest.Split("bench.yaml", data)
		rep, errs := eval.Run(eng, docs, "")
		if len(errs) > 0 || rep.Summary.Fail != pods/10 {
			b.Fatalf("errors %v, %d failures", errs, rep.Summary.Fail)
		}
	}
	b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "pods/s")
}

// BenchmarkEvalPreparsed is BenchmarkEvalThroughput without YAML: the same
// 10,000 pods already decoded, so it measures rule evaluation and reporting.
func BenchmarkEvalPreparsed(b *testing.B) {
	const pods = 10_000
	eng := restrictedEngine(b)
	objs := make([]*unstructured.Unstructured, pods)
	for i := range objs {
		objs[i] = &unstructured.Unstructured{Object: pod(i, 1+i%3, i%10 == 0)}
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, o := range objs {
			if _, err := eng.Evaluate(context.Background(), o, engine.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "pods/s")
}
