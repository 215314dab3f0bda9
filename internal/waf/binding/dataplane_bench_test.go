package binding_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/proxy"
)

// benchPollInterval is the data planes' --poll-interval in the benchmark:
// the shortest a waf-proxy accepts.
const benchPollInterval = proxy.MinPollInterval

// BenchmarkPolicyChangeToDataPlanes measures, with the shape of
// BenchmarkPolicyChangeToTables (1,000 HTTPRoutes over 50 Gateways,
// policies at both levels), the time from an update of a Gateway-level
// policy (its rule set swapped) until every affected Gateway's data plane
// enforces it: one in-process `waf-proxy --gateway` per Gateway (its
// TablePoller at benchPollInterval over the cache's TLS API with a token of
// the namespace, and its Router), each sent a real request to an affected
// route until it gives the new verdict. Changes land at a random point of
// the poll cycle. It reports p50, p99 and max of that time per change over
// the run.
func BenchmarkPolicyChangeToDataPlanes(b *testing.B) {
	shared.Cluster(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := fmt.Sprintf("dpbench-%d", time.Now().UnixNano()%100000)
	setupBench(b, ctx, ns)
	routers := startDataPlanes(b, ctx, ns)
	// A request the strict rule set refuses and the base one lets through,
	// to an affected route that inherits the Gateway-level policy.
	verdict := func(g int) int {
		req := httptest.NewRequest(http.MethodGet, "/svc1?q=strict", nil)
		req.Host = fmt.Sprintf("app1.gw%d.example.com", g)
		rec := httptest.NewRecorder()
		routers[g].ServeHTTP(rec, req)
		return rec.Code
	}
	want := map[string]int{"base": http.StatusOK, "strict": http.StatusForbidden}
	waitEnforced := func(set string) error {
		pending := make([]int, benchGatewaysPerPol)
		for g := range pending {
			pending[g] = g
		}
		return wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			pending = slices.DeleteFunc(pending, func(g int) bool { return verdict(g) == want[set] })
			return len(pending) == 0, nil
		})
	}
	if err := waitEnforced("base"); err != nil {
		b.Fatalf("the data planes never enforced the settled tables: %v", err)
	}
	var pol wafv1alpha1.WAFGatewayBindingPolicy
	key := client.ObjectKey{Namespace: ns, Name: "gw-policy-0"}
	sets := []string{"strict", "base"}
	var took []time.Duration
	b.ResetTimer()
	i := 0
	for b.Loop() {
		set := sets[i%2]
		i++
		// Changes land at a random point of the data planes' poll
		// cycle, as real ones do, not just after a poll.
		b.StopTimer()
		time.Sleep(rand.N(benchPollInterval))
		b.StartTimer()
		if err := env.Client.Get(ctx, key, &pol); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		patch := client.MergeFrom(pol.DeepCopy())
		pol.Spec.RuleSet.Name = set
		if err := env.Client.Patch(ctx, &pol, patch); err != nil {
			b.Fatal(err)
		}
		if err := waitEnforced(set); err != nil {
			b.Fatalf("the data planes did not follow the policy to %s: %v (gw-0 answers %d)", set, err, verdict(0))
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	ms := func(q float64) float64 {
		return float64(took[min(len(took)-1, int(q*float64(len(took))))].Microseconds()) / 1000
	}
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(benchPollInterval.Seconds(), "poll-s")
	b.ReportMetric(benchGatewaysPerPol, "gateways/op")
}

// startDataPlanes runs one in-process `waf-proxy --gateway ns/gw-N` per
// Gateway of the benchmark, in front of one upstream, and returns their
// routers.
func startDataPlanes(b *testing.B, ctx context.Context, ns string) []*proxy.Router {
	b.Helper()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	b.Cleanup(upstream.Close)
	up, _ := url.Parse(upstream.URL)
	token, err := env.Token(ctx, ns, "waf-proxy", cache.Audience)
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	routers := make([]*proxy.Router, benchGateways)
	done := make(chan struct{}, benchGateways)
	for g := range benchGateways {
		cc, err := env.NewClient(token)
		if err != nil {
			b.Fatal(err)
		}
		routers[g] = &proxy.Router{Logger: log, NewProxy: func(l *slog.Logger) *proxy.Proxy { return &proxy.Proxy{Upstream: up, Logger: l} }}
		p := &proxy.TablePoller{Client: cc, Namespace: ns, Gateway: fmt.Sprintf("gw-%d", g), Interval: benchPollInterval, Target: routers[g], Logger: log}
		go func() {
			defer func() { done <- struct{}{} }()
			_ = p.Run(ctx)
		}()
	}
	b.Cleanup(func() {
		for range benchGateways {
			<-done
		}
	})
	return routers
}
