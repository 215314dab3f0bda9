package lookup_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/lookup"
)

// BenchmarkAdmissionLookupLiveCache is BenchmarkAdmissionLookup against the
// real shared cluster cache, filled by its informer from a real API server
// holding 5,000 Services in one namespace: what Portal's webhook reads.
func BenchmarkAdmissionLookupLiveCache(b *testing.B) {
	services := 5000
	if n, err := strconv.Atoi(os.Getenv("PORTAL_BENCH_LOOKUP_SERVICES")); err == nil && n > 0 {
		services = n
	}
	ctx := context.Background()
	cl := shared.Cluster(b)
	cfg := rest.CopyConfig(cl.Config)
	cfg.QPS, cfg.Burst = -1, 0 // client-go's default 5/s would take 17 minutes
	cs := kubernetes.NewForConfigOrDie(cfg)
	const ns = "bench-lookup"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				app := fmt.Sprint("app-", i)
				_, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("svc-", i), Labels: map[string]string{"app": app}},
					// Headless: the test API server's service range holds ~250 IPs.
					Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": app}, Ports: []corev1.ServicePort{{Port: 80}}},
				}, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					b.Error(err)
				}
			}
		})
	}
	for i := range services {
		work <- i
	}
	close(work)
	wg.Wait()

	httpClient, err := rest.HTTPClientFor(cl.Config)
	if err != nil {
		b.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cl.Config, httpClient)
	if err != nil {
		b.Fatal(err)
	}
	cache, err := clustercache.New(cl.Config, mapper, clustercache.Options{})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = cache.Start(runCtx) }()
	sc := lookup.NewSharedCache(cache)
	svc := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	release, err := sc.Watch(runCtx, svc, "", func(string, string, labels.Labels, labels.Labels) {}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	var last error
	held := 0
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		l, err := sc.List(svc, ns, labels.Everything())
		last, held = err, len(l)
		return err == nil && len(l) >= services, nil
	})
	if err != nil {
		b.Fatalf("the cache never held %d Services (last: %d, %v): %v", services, held, last, err)
	}
	inbound := u(map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": md(ns, "new", map[string]any{"app": "app-42"}),
		"spec": map[string]any{"selector": map[string]any{"app": "app-42"}}})
	// shared: the binder reads through the view that holds the watch, as
	// Portal wires it. split: through a second view of the same cache,
	// holding no watch, as Portal wired it before the binder and the
	// watcher were given one: every read decodes what it returns again.
	views := []struct {
		name string
		l    *lookup.Lookups
	}{
		{"shared", lookup.New(lookup.Options{Cache: sc, Resolver: sc})},
		{"split", lookup.New(lookup.Options{Cache: lookup.NewSharedCache(cache), Resolver: sc})},
	}
	for _, v := range views {
		for _, rc := range []struct{ name, expr string }{
			{"all", `any(cluster.services.list(object.metadata.namespace, {}), #.metadata.name != object.metadata.name && #.spec?.selector == object.spec?.selector)`},
			{"selector", `len(cluster.services.list(object.metadata.namespace, {"app": object.metadata.labels.app})) > 1`},
		} {
			benchLiveLookup(b, v.name+"/"+rc.name, v.l, rc.expr, inbound)
		}
	}
}

// benchLiveLookup measures single admission evaluations of a rule that
// reads cluster.* through l.
func benchLiveLookup(b *testing.B, name string, l *lookup.Lookups, expr string, inbound *unstructured.Unstructured) {
	ctx := context.Background()
	b.Run(name, func(b *testing.B) {
		eng := newEngine(b, l, rule("duplicate-selector", "", expr, serviceGVK))
		opts := engine.Options{Mode: core.ModeAdmission, Request: &core.Request{Operation: "CREATE"}}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			res, err := eng.Evaluate(ctx, inbound, opts)
			lat = append(lat, time.Since(start))
			if err != nil || len(res) != 1 || res[0].Outcome != core.OutcomeFail {
				b.Fatalf("%v %v", res, err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
	})
}
