package runtime_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	goruntime "runtime"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/runtime"
)

// benchSource is a source with the cookbook's runtime rules over the pods
// of examples/runtime, without outputs: what one event costs to ingest and
// evaluate.
func benchSource(b *testing.B, o runtime.Options) (*runtime.Source, []event.Event) {
	b.Helper()
	eng := engine.New(exprlang.New())
	rules, errs := rule.LoadPaths(eng, []string{"../../examples/rules/runtime"})
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	eng.SetRules(rules)
	state, lerrs := eval.LoadClusterState([]string{"../../examples/runtime/cluster.yaml"}, nil)
	if len(lerrs) > 0 {
		b.Fatal(lerrs)
	}
	var targets clustercache.Reader = state
	o.Engine, o.Targets = eng, targets
	o.Logger = slog.New(slog.DiscardHandler)
	f, err := os.Open("../../examples/runtime/audit.log")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var evs []event.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ev, err := event.DecodeLine(sc.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		evs = append(evs, ev)
	}
	return runtime.NewSource(o, runtime.NewMetrics(prometheus.NewRegistry())), evs
}

// vary makes the i-th copy of ev a request of its own, by its own user,
// so neither the stage nor the deduplication skips it.
func vary(ev event.Event, i int) event.Event {
	ev.AuditID = fmt.Sprintf("%s-%d", ev.AuditID, i)
	ev.User.Username = fmt.Sprintf("%s-%d", ev.User.Username, i%1000)
	return ev
}

// BenchmarkRuntimeEvaluate: events one core ingests and evaluates with the
// cookbook's five runtime rules, from the recorded audit log's mix (exec,
// port-forward, Secret reads by a person and by a controller, a pod
// create): the stage decision, classes, target lookup, event context and
// every rule. Run with -cpu 1 for the per-core figure.
func BenchmarkRuntimeEvaluate(b *testing.B) {
	src, evs := benchSource(b, runtime.Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		src.Evaluate(ctx, runtime.InputWebhook, vary(evs[i%len(evs)], i))
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkRuntimeMemoryAt10kPerSecond offers 10,000 events a second for
// b.N seconds through the queue and the workers, as the endpoint would,
// and reports the live heap at the end and the events dropped (none is the
// goal: the workers keep up).
func BenchmarkRuntimeMemoryAt10kPerSecond(b *testing.B) {
	src, evs := benchSource(b, runtime.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = src.Start(ctx); close(done) }()
	const rate = 10000
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	sent, dropped := 0, 0
	var heaps []uint64
	b.ResetTimer()
	for s := range b.N {
		for range 100 {
			<-tick.C
			for range rate / 100 {
				if !src.Offer(runtime.InputWebhook, vary(evs[sent%len(evs)], sent)) {
					dropped++
				}
				sent++
			}
		}
		var ms goruntime.MemStats
		goruntime.ReadMemStats(&ms)
		heaps = append(heaps, ms.HeapInuse)
		_ = s
	}
	b.StopTimer()
	cancel()
	<-done
	sort.Slice(heaps, func(i, j int) bool { return heaps[i] < heaps[j] })
	b.ReportMetric(float64(heaps[len(heaps)-1])/(1<<20), "max-heap-MiB")
	b.ReportMetric(float64(dropped), "dropped")
	b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "offered/s")
}
