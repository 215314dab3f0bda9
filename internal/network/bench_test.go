package network_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/network"
)

// The benchmark cluster: 1,000 namespaces, 10 pods each, 2 NetworkPolicies
// each (a default-deny in every other namespace, an allow rule in each, and
// a namespaceSelector peer in one namespace of ten).
const (
	benchNamespaces = 1000
	benchPods       = 10
)

var (
	benchOnce sync.Once
	benchErr  error
)

func benchCluster(b *testing.B) {
	c := cluster(b)
	benchOnce.Do(func() { benchErr = populate(c) })
	if benchErr != nil {
		b.Fatal(benchErr)
	}
}

func populate(c client.Client) error {
	ctx := context.Background()
	work := make(chan client.Object)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for o := range work {
				if err := c.Create(ctx, o); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range benchNamespaces {
		ns := fmt.Sprintf("bench-%04d", i)
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"tier": fmt.Sprint(i % 4)}}}); err != nil {
			return err
		}
		for j := range benchPods {
			work <- pod(ns, fmt.Sprintf("p%d", j), map[string]string{"app": fmt.Sprintf("a%d", j%5)})
		}
		if i%2 == 0 {
			work <- np(ns, "default-deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress})
		}
		from := []networkingv1.NetworkPolicyPeer{{PodSelector: selector("app", "a1")}}
		if i%10 == 0 {
			from = append(from, networkingv1.NetworkPolicyPeer{NamespaceSelector: selector("tier", "1"), PodSelector: selector("app", "a2")})
		}
		spec := networkingv1.NetworkPolicySpec{
			PodSelector: *selector("app", "a0"), PolicyTypes: ingress,
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: from}},
		}
		work <- np(ns, "allow-a1", spec)
		if i%2 == 1 {
			work <- np(ns, "allow-a3", networkingv1.NetworkPolicySpec{PodSelector: *selector("app", "a3"), PolicyTypes: ingress})
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// recorder is a sink that records when each object's findings reach the
// sinks.
type recorder struct {
	mu   sync.Mutex
	seen map[core.ObjectKey]chan struct{}
}

func (*recorder) Name() string             { return "bench-recorder" }
func (*recorder) NeedLeaderElection() bool { return false }

func (r *recorder) Publish(_ context.Context, b core.FindingBatch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, of := range b.Objects {
		if ch, ok := r.seen[of.Object.Key()]; ok && len(of.Findings) > 0 {
			close(ch)
			delete(r.seen, of.Object.Key())
		}
	}
	return nil
}

func (r *recorder) expect(k core.ObjectKey) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	r.seen[k] = ch
	return ch
}

// BenchmarkAnalyser measures, on 1,000 namespaces, 10,000 pods and 2,000
// NetworkPolicies in a real API server: the time from start to the first
// full analysis published (first-analysis-ms), the heap it holds (heap-MB:
// the cluster cache's pods, policies and namespaces, the analyser and the
// findings), and, per iteration, the time from a NetworkPolicy's create
// call to its finding reaching the sinks (sink-p50/p99-ms) and to the
// finding read back from its namespace's PolicyReport (report-p50/p99-ms,
// polled every 2 ms).
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s go test -run '^$' -bench BenchmarkAnalyser -benchtime 200x ./internal/network/
func BenchmarkAnalyser(b *testing.B) {
	benchCluster(b)
	c := env.client
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	rec := &recorder{seen: map[core.ObjectKey]chan struct{}{}}
	t0 := time.Now()
	inst := startWith(b, nil, network.DefaultConfig(), rec)
	first := time.Since(t0)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	var lat, reportLat []time.Duration
	i := 0
	for b.Loop() {
		ns := fmt.Sprintf("bench-%04d", rand.IntN(benchNamespaces))
		name := fmt.Sprintf("change-%d-%d", time.Now().UnixNano(), i)
		i++
		done := rec.expect(core.ObjectKey{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Namespace: ns, Name: name})
		start := time.Now()
		if err := c.Create(context.Background(), np(ns, name, networkingv1.NetworkPolicySpec{PodSelector: *selector("app", "nobody"), PolicyTypes: ingress})); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.Fatalf("no finding for %s/%s within 30s", ns, name)
		}
		lat = append(lat, time.Since(start))
		// Then read the PolicyReport back from the API server, as a
		// user would, until it holds the finding.
		err := wait.PollUntilContextTimeout(context.Background(), 2*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var prs reportsv1alpha2.PolicyReportList
			if err := c.List(ctx, &prs, client.InNamespace(ns)); err != nil {
				return false, nil
			}
			for _, r := range prs.Items {
				for _, res := range r.Results {
					if res.Policy == network.CheckPolicyWithoutTargets && res.Resources[0].Name == name {
						return true, nil
					}
				}
			}
			return false, nil
		})
		if err != nil {
			b.Fatalf("%s/%s not in a PolicyReport: %v", ns, name, err)
		}
		reportLat = append(reportLat, time.Since(start))
	}
	b.StopTimer()
	pct := func(lat []time.Duration, p float64) float64 {
		slices.Sort(lat)
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(first.Milliseconds()), "first-analysis-ms")
	b.ReportMetric(float64(after.HeapInuse-min(after.HeapInuse, before.HeapInuse))/(1<<20), "heap-MB")
	b.ReportMetric(pct(lat, 0.5), "sink-p50-ms")
	b.ReportMetric(pct(lat, 0.99), "sink-p99-ms")
	b.ReportMetric(pct(reportLat, 0.5), "report-p50-ms")
	b.ReportMetric(pct(reportLat, 0.99), "report-p99-ms")
	b.ReportMetric(float64(len(inst.pipe.Snapshot())), "objects-with-findings")
}
