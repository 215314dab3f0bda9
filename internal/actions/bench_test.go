package actions_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// BenchmarkActions measures action throughput and the latency from a
// finding published into the pipeline to its action done, against a real
// API server: label (one server-side apply per action) and, for the
// engine's own cost, dry-run.
//
//	KUBEBUILDER_ASSETS=bin/k8s go test -run '^$' -bench BenchmarkActions -benchtime 2000x ./internal/actions
func BenchmarkActions(b *testing.B) {
	for _, mode := range []string{"dry-run", "label"} {
		b.Run(mode, func(b *testing.B) {
			e := startWith(b, func(o *actions.Options) {
				o.DryRun = mode == "dry-run"
				o.DefaultRateLimit = "100000/s"
				o.Recorder = nil // Events are rate limited by client-go; not the engine's cost.
			}, false)
			ns := e.namespace(fmt.Sprintf("bench-%s-%d", mode, b.N))
			const pods = 100
			var refs []core.ResourceRef
			for i := range pods {
				refs = append(refs, podRef(e.pod(ns, fmt.Sprintf("p%d", i), nil)))
			}
			result := actions.ResultSuccess
			if mode == "dry-run" {
				result = actions.ResultDryRun
			}
			// Each pod's state gains one finding (of a new rule) per round,
			// published straight to the engine: the pipeline would
			// coalesce the rounds.
			state := make([][]core.Finding, pods)
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				r := clusterRule(fmt.Sprintf("bench-%d", i/pods), spec("label", "key", "portal.io/bench", "value", "x"))
				ref := refs[i%pods]
				state[i%pods] = append(state[i%pods], core.Finding{Result: core.Result{Rule: r, Resource: ref, Outcome: core.OutcomeFail}})
				of := core.ObjectFindings{Object: ref, Findings: slices.Clone(state[i%pods]), Observed: time.Now()}
				if err := e.eng.Publish(ctx, core.FindingBatch{Objects: []core.ObjectFindings{of}}); err != nil {
					b.Fatal(err)
				}
			}
			devtest.Eventually(b, "every action done", func() bool { return int(e.count("label", result)) >= b.N })
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "actions/s")
			m := &dto.Metric{}
			if err := e.eng.Metrics().Latency.WithLabelValues("label").(interface{ Write(*dto.Metric) error }).Write(m); err == nil && m.Histogram.GetSampleCount() > 0 {
				h := m.Histogram
				b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount())*1000, "ms-mean-latency")
				b.ReportMetric(quantile(h, 0.99)*1000, "ms-p99-latency")
			}
		})
	}
}

// quantile is the upper bound of the histogram bucket holding quantile q.
func quantile(h *dto.Histogram, q float64) float64 {
	want := q * float64(h.GetSampleCount())
	for _, bk := range h.GetBucket() {
		if float64(bk.GetCumulativeCount()) >= want {
			return bk.GetUpperBound()
		}
	}
	return 0
}
