package lookup_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/lookup"
)

// requirePDB is examples/rules/cross-resource/require-pdb-per-deployment.
const requirePDB = `(object.spec?.replicas ?? 1) > 1 &&
  none(cluster.poddisruptionbudgets.list(object.metadata.namespace, {}),
       selects(#.spec?.selector, object.spec?.template?.metadata?.labels))`

func u(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }

func md(ns, name string, lbls map[string]any) map[string]any {
	return map[string]any{"namespace": ns, "name": name, "labels": lbls}
}

// percentile returns the p-th percentile of ds (sorted in place).
func percentile(ds []time.Duration, p float64) time.Duration {
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

// BenchmarkChangeToFinding measures, with 100,000 cached objects (100
// namespaces of 10 Deployments, 10 PodDisruptionBudgets and 980 Pods) and
// 1,000 (rule, Deployment) pairs in the dependency index, the time from a
// PodDisruptionBudget's change event to the re-evaluation of every
// Deployment that read it (10 per namespace) on two workers: the path
// watcher -> index -> re-queue -> evaluation with lookups. Writing the
// finding to its PolicyReport is the sink's, measured by its own
// benchmarks. Cycle protection is off: the benchmark changes each budget
// far more often than it allows.
func BenchmarkChangeToFinding(b *testing.B) {
	const namespaces, perNS, pods = 100, 10, 980
	var sb clustercache.StaticBuilder
	deploys := map[lookup.ObjectKey]*unstructured.Unstructured{}
	add := func(o *unstructured.Unstructured) {
		if err := sb.Add(o, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	for n := range namespaces {
		ns := fmt.Sprint("ns-", n)
		for i := range perNS {
			app := map[string]any{"app": fmt.Sprint("app-", i)}
			d := u(map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": md(ns, fmt.Sprint("d-", i), nil),
				"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"metadata": map[string]any{"labels": app}}}})
			add(d)
			deploys[lookup.ObjectKeyOf(d)] = d
			add(u(map[string]any{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": md(ns, fmt.Sprint("pdb-", i), nil),
				"spec": map[string]any{"minAvailable": int64(1), "selector": map[string]any{"matchLabels": app}}}))
		}
		for i := range pods {
			add(u(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md(ns, fmt.Sprint("p-", i), map[string]any{"app": fmt.Sprint("app-", i%perNS)}),
				"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}}}))
		}
	}
	cache := lookup.FromReader{R: sb.Build()}
	index := lookup.NewDepIndex(0)
	l := lookup.New(lookup.Options{Cache: cache, Resolver: cache, Index: index})
	eng := newEngine(b, l, rule("require-pdb", "", requirePDB, deployGVK))
	for _, d := range deploys {
		if _, err := eng.Evaluate(context.Background(), d, engine.Options{Mode: core.ModeAudit}); err != nil {
			b.Fatal(err)
		}
	}
	if index.Len() != namespaces*perNS {
		b.Fatalf("index holds %d entries, want %d", index.Len(), namespaces*perNS)
	}

	queue := make(chan lookup.ObjectKey, 4096)
	var done sync.WaitGroup
	for range 2 {
		go func() {
			for k := range queue {
				if _, err := eng.Evaluate(context.Background(), deploys[k], engine.Options{Mode: core.ModeAudit}); err != nil {
					b.Error(err)
				}
				done.Done()
			}
		}()
	}
	defer close(queue)
	w := lookup.NewWatcher(lookup.WatcherOptions{Engine: eng, Cache: cache.Static(), Resolver: cache, Index: index, CycleLimit: 1 << 30,
		Requeuer: lookup.RequeueFunc(func(k lookup.ObjectKey) { done.Add(1); queue <- k })})
	pdbs := schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		ns, name := fmt.Sprint("ns-", i%namespaces), fmt.Sprint("pdb-", i%perNS)
		set := labels.Set{}
		start := time.Now()
		w.Changed(pdbs, ns, name, set, set)
		done.Wait()
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkDepIndexMemory fills the dependency index to its default bound
// (500,000 entries: 250,000 evaluations reading one object by name and one
// namespace by selector) and reports the heap it holds per entry.
func BenchmarkDepIndexMemory(b *testing.B) {
	const n = lookup.DefaultMaxDependencies
	svc := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	pdb := schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}
	sel, _ := labels.Parse("app=web")
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		idx := lookup.NewDepIndex(n)
		for i := range n / 2 {
			ns, name := fmt.Sprint("ns-", i%1000), fmt.Sprint("obj-", i)
			d := lookup.Dependent{Rule: lookup.RuleKey{Kind: "PortalClusterRule", Name: "require-pdb"}, Object: lookup.ObjectKey{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, Namespace: ns, Name: name}}
			idx.Add(d, lookup.Read{GVR: svc, Namespace: ns, Name: name})
			idx.Add(d, lookup.Read{GVR: pdb, Namespace: ns, Selector: sel})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if idx.Len() != n {
			b.Fatalf("Len %d", idx.Len())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "bytes/entry")
		runtime.KeepAlive(idx)
	}
}

// BenchmarkAdmissionLookup evaluates a lookup rule at admission (the
// inbound Service in the overlay) against a namespace of 5,000 Services,
// the case of kyverno issue 4459, and reports the p99 of one evaluation.
// "all" lists every Service and compares selectors; "selector" lists only
// those with the inbound Service's app label.
func BenchmarkAdmissionLookup(b *testing.B) {
	const services = 5000
	var sb clustercache.StaticBuilder
	for i := range services {
		app := map[string]any{"app": fmt.Sprint("app-", i)}
		if err := sb.Add(u(map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": md("shop", fmt.Sprint("svc-", i), app),
			"spec": map[string]any{"selector": app, "ports": []any{map[string]any{"port": int64(80)}}}}), "bench"); err != nil {
			b.Fatal(err)
		}
	}
	cache := lookup.FromReader{R: sb.Build()}
	l := lookup.New(lookup.Options{Cache: cache, Resolver: cache})
	inbound := u(map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": md("shop", "new", map[string]any{"app": "app-42"}),
		"spec": map[string]any{"selector": map[string]any{"app": "app-42"}}})
	for name, expr := range map[string]string{
		"all":      `any(cluster.services.list(object.metadata.namespace, {}), #.metadata.name != object.metadata.name && #.spec?.selector == object.spec?.selector)`,
		"selector": `len(cluster.services.list(object.metadata.namespace, {"app": object.metadata.labels.app})) > 1`,
	} {
		b.Run(name, func(b *testing.B) {
			eng := newEngine(b, l, rule("duplicate-selector", "", expr, serviceGVK))
			opts := engine.Options{Mode: core.ModeAdmission, Request: &core.Request{Operation: "CREATE"}}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				res, err := eng.Evaluate(context.Background(), inbound, opts)
				lat = append(lat, time.Since(start))
				if err != nil || len(res) != 1 || res[0].Outcome != core.OutcomeFail {
					b.Fatalf("%v %v", res, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
		})
	}
}
