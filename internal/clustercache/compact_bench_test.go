package clustercache

import (
	"fmt"
	"io"
	"log/slog"
	goruntime "runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// BenchmarkCachedPod times compact, which each informer event pays, and
// decode, which each evaluation pays, on a set of realistic pods sharing one
// dictionary. compact reports the heap one cached pod holds as the
// unstructured object the informer used to cache (managedFields stripped)
// and as a Object.
func BenchmarkCachedPod(b *testing.B) {
	const n = 1000
	pods := make([]*unstructured.Unstructured, n)
	for i := range pods {
		pods[i] = podVariant(b, i)
	}
	d := new(dictionary)
	cached := make([]*Object, n)
	for i, u := range pods {
		cached[i] = compact(u.DeepCopy(), d)
	}
	b.Run("compact", func(b *testing.B) {
		unstructuredBytes := heldPerObject(b, n, func(i int) any {
			u := podVariant(b, i)
			unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
			return u
		})
		compactBytes := heldPerObject(b, n, func(i int) any { return compact(podVariant(b, i), d) })
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			// Compacted again, each pod has lost its managedFields
			// already: the JSON deflated is the same as the first time.
			if c := compact(pods[i%n], d); c.err != nil {
				b.Fatal(c.err)
			}
			i++
		}
		b.ReportMetric(unstructuredBytes, "unstructured-B/pod")
		b.ReportMetric(compactBytes, "compact-B/pod")
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := cached[i%n].decode(); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkCompactTransform times the transform of one decoded pod. The
// pod is compacted again and again: the first call drops its managedFields,
// after which each call encodes what the cache holds, as the first did.
func BenchmarkCompactTransform(b *testing.B) {
	transform := compactTransform(slog.New(slog.NewTextHandler(io.Discard, nil)), "pods")
	if _, err := transform(podVariant(b, 0)); err != nil {
		b.Fatal(err)
	}
	u := decodeJSON(b, podJSON)
	b.ReportAllocs()
	for b.Loop() {
		if c, _ := transform(u); c.(*Object).err != nil {
			b.Fatal(c.(*Object).err)
		}
	}
}

// heldPerObject is the live heap each of n objects from build holds.
func heldPerObject(b *testing.B, n int, build func(i int) any) float64 {
	objs := make([]any, n)
	var before, after goruntime.MemStats
	// Twice, so that the pools hold nothing: a pooled flate.Writer alone
	// is hundreds of KB.
	goruntime.GC()
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	for i := range objs {
		objs[i] = build(i)
	}
	goruntime.GC()
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	goruntime.KeepAlive(objs)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if held < 0 {
		b.Fatalf("heap shrank by %d bytes while building", -held)
	}
	return float64(held) / float64(n)
}

// BenchmarkListSelector is a lookup's read: the Services of one namespace
// whose labels a selector matches, out of 5,000 cached in 50 namespaces.
// "match" only selects (flat labels, no decode); "decode" also decodes the
// matches, as List does.
func BenchmarkListSelector(b *testing.B) {
	const n, namespaces = 5000, 50
	// The informer never runs: the benchmark fills its store directly.
	c := NewForClient(dynamic.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"}), nil, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	inf, err := c.newInformer(Scope{Resource: schema.GroupVersionResource{Version: "v1", Resource: "services"}}, Resource{})
	if err != nil {
		b.Fatal(err)
	}
	d := new(dictionary)
	for i := range n {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80), "targetPort": int64(8080)}}, "selector": map[string]any{"app": fmt.Sprintf("app-%d", i%20)}},
		}}
		u.SetNamespace(fmt.Sprintf("ns-%02d", i%namespaces))
		u.SetName(fmt.Sprintf("svc-%04d", i))
		u.SetLabels(map[string]string{"app": fmt.Sprintf("app-%d", i%20), "tier": []string{"front", "back"}[i%2]})
		if err := inf.inf.GetIndexer().Add(compact(u, d)); err != nil {
			b.Fatal(err)
		}
	}
	h := &Handle{c: c, inf: inf}
	sel := labels.SelectorFromSet(labels.Set{"tier": "front"})
	b.Run("match", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if got := h.Objects("ns-08", sel); len(got) == 0 {
				b.Fatal("no match")
			}
		}
	})
	// A selector matched against every object of a namespace, as the
	// network analysis reads pods: each object's labels in an interface of
	// their own, or one view for all.
	for _, scan := range []struct {
		name string
		each func(fn func(labels.Labels) bool)
	}{
		{"each", func(fn func(labels.Labels) bool) {
			h.Each("ns-08", func(o *Object) bool { return fn(o.Labels()) })
		}},
		{"each-labels", func(fn func(labels.Labels) bool) {
			h.EachLabels("ns-08", func(_ *Object, l labels.Labels) bool { return fn(l) })
		}},
	} {
		b.Run(scan.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				scan.each(func(l labels.Labels) bool {
					if sel.Matches(l) {
						n++
					}
					return true
				})
				if n == 0 {
					b.Fatal("no match")
				}
			}
		})
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if got, err := decodeAll(h.Objects("ns-08", sel)); err != nil || len(got) == 0 {
				b.Fatal(err)
			}
		}
	})
}
