//go:build linux

package admission_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	portaladmission "github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/test/bench/benchstat"
)

// Settings, each overridable by an environment variable.
var (
	podsPerConfig = envInt("PORTAL_BENCH_PODS", 3000)  // measured creates per configuration
	roundSize     = envInt("PORTAL_BENCH_ROUND", 250)  // creates per configuration per round
	clients       = envInt("PORTAL_BENCH_CLIENTS", 8)  // concurrent clients
	warmupPods    = envInt("PORTAL_BENCH_WARMUP", 100) // unmeasured creates per configuration first
)

// portalNamespace is Portal's own namespace (never subject to its webhook).
const portalNamespace = "portal-bench"

// A configuration is one namespace and what checks its pods.
type configuration struct {
	key, what, namespace string
}

var configurations = []configuration{
	{"a", "no admission policy", "bench-none"},
	{"b", "Portal webhook, restricted bundle", "bench-portal"},
	{"c", "ValidatingAdmissionPolicy, CEL", "bench-vap"},
}

// result is what one run measured.
type result struct {
	latency    map[string]latencies // by configuration key
	throughput map[string]float64   // creates/s, by configuration key
	failures   map[string][]error   // failed creates, by configuration key
	// In-handler decision time, from portal_admission_latency_seconds.
	handlerP50, handlerP99           float64 // estimates (seconds)
	handlerP50Bound, handlerP99Bound float64 // upper bounds of their buckets
	handlerMean                      float64
	handlerCount                     float64
	// Seen by the API server: mean time of one call to Portal's webhook, and
	// of the ValidatingAdmissionPolicy plugin per pod of (c).
	apiserverWebhookMean, apiserverVAPMean float64
	// Portal's memory (kB): idle before the rounds, highest sample during
	// them, and the kernel's high-water mark for the whole process. Anon is
	// the private part of RSS (heap, stacks); the rest is file-backed, the
	// pages of the executable that were touched.
	rssIdle, rssPeakSampled, rssHWM int64
	anonIdle, anonPeakSampled       int64
	fileIdle, filePeakSampled       int64
	direct                          *direct
	rounds                          int
	elapsed                         time.Duration
	loadBefore, loadAfter           string
}

// BenchmarkAdmission creates pods through a real kube-apiserver in three
// configurations, interleaved in rounds, and reports their create latencies,
// Portal's in-handler decision time and Portal's memory. See doc.go. Each
// call is one whole run on a fresh control plane, whatever b.N: the run takes
// far longer than the default -benchtime, so the framework calls it once;
// -count n makes n independent runs.
func BenchmarkAdmission(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a control plane and creates thousands of pods")
	}
	r, err := run(b)
	if err != nil {
		b.Fatal(err)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op") // one fixed experiment, not b.N operations
	for _, c := range configurations {
		b.ReportMetric(ms(r.latency[c.key].P50), c.key+"-p50-ms")
		b.ReportMetric(ms(r.latency[c.key].P99), c.key+"-p99-ms")
	}
	b.ReportMetric(ms(r.latency["b"].P99-r.latency["a"].P99), "portal-overhead-p99-ms")
	b.ReportMetric(ms(r.latency["c"].P99-r.latency["a"].P99), "vap-overhead-p99-ms")
	b.ReportMetric(r.handlerP99*1e6, "handler-p99-µs")
	b.ReportMetric(float64(r.direct.handler.P99)/float64(time.Microsecond), "handler-direct-p99-µs")
	b.ReportMetric(float64(max(r.rssHWM, r.rssPeakSampled))/1024, "portal-rss-peak-MiB")
	b.ReportMetric(float64(r.anonPeakSampled)/1024, "portal-anon-peak-MiB")
}

func logf(format string, args ...any) { fmt.Printf("bench-admission: "+format+"\n", args...) }

func run(b *testing.B) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	res := &result{latency: map[string]latencies{}, throughput: map[string]float64{}, failures: map[string][]error{}, loadBefore: loadAverage()}

	logf("starting etcd and kube-apiserver from bin/k8s")
	cluster, err := devcluster.Start(ctx, devcluster.Options{})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			b.Error(err)
		}
	}()
	restCfg, cs, cl, err := newClients(cluster)
	if err != nil {
		return nil, err
	}
	nRules, err := installConfigurations(ctx, cs, cl)
	if err != nil {
		return nil, err
	}
	portal, err := startPortal(b, cluster)
	if err != nil {
		return nil, err
	}
	defer portal.Stop()
	if err := portal.WaitReady(ctx, cl, nRules, webhookCoversPods(cl)); err != nil {
		return nil, err
	}
	logf("portal running as pid %d with %d rules", portal.Pid(), nRules)
	if err := isolateConfigurations(ctx, cs, portal); err != nil {
		return nil, err
	}

	workers, err := warmUp(ctx, restCfg, portal)
	if err != nil {
		return nil, err
	}
	portalBefore, apiBefore, err := scrape(ctx, portal, cs)
	if err != nil {
		return nil, err
	}
	all, busy, err := measureRoundsAndMemory(ctx, workers, res, portal)
	if err != nil {
		return nil, err
	}

	portalAfter, apiAfter, err := scrape(ctx, portal, cs)
	if err != nil {
		return nil, err
	}
	for _, c := range configurations {
		res.latency[c.key] = summarise(all[c.key])
		res.throughput[c.key] = float64(len(all[c.key])) / busy[c.key].Seconds()
	}
	if err := handlerFigures(res, all, portalBefore, portalAfter); err != nil {
		return nil, err
	}
	if err := checkNarrowed(ctx, cs, configurations[1].namespace); err != nil {
		return nil, err
	}
	apiserverFigures(res, all, apiBefore, apiAfter)

	if res.direct, err = measureDirect(ctx, restCfg, cs, configurations[1].namespace, podsPerConfig); err != nil {
		return nil, err
	}

	report(os.Stdout, res)
	return res, nil
}

// newClients returns the clients of the run, without client-side rate limit.
func newClients(cluster *devcluster.Cluster) (*rest.Config, kubernetes.Interface, client.Client, error) {
	restCfg := rest.CopyConfig(cluster.Config)
	restCfg.QPS, restCfg.Burst = -1, 0 // no client-side rate limit
	// The sanity check's dry runs would log a warning each (Windows pods).
	restCfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, nil, err
	}
	scheme, err := manager.Scheme()
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, nil, err
	}
	if v, err := cs.Discovery().ServerVersion(); err == nil {
		logf("kube-apiserver %s", v.GitVersion)
	}
	return restCfg, cs, cl, nil
}

// installConfigurations creates the namespaces, (c)'s policy and (b)'s
// rules, and returns the number of rules.
func installConfigurations(ctx context.Context, cs kubernetes.Interface, cl client.Client) (int, error) {
	for _, ns := range []string{portalNamespace, configurations[0].namespace, configurations[1].namespace, configurations[2].namespace} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return 0, err
		}
	}

	// (c): the policy and its binding.
	if err := installPolicy(ctx, cs); err != nil {
		return 0, err
	}

	// (b): the rules as PortalClusterRules, as `portal dev` installs them,
	// then (by the caller) Portal in a child process.
	return installRules(ctx, cl)
}

// isolateConfigurations makes each configuration enforce exactly what it
// should, and only where it should, and checks that it does.
func isolateConfigurations(ctx context.Context, cs kubernetes.Interface, portal *benchstat.Child) error {
	// Portal's webhook configuration intercepts every namespace but the
	// system ones and Portal's own. Narrow it to (b)'s namespace, so (a)
	// and (c) really have no webhook. Portal applies its configuration at
	// start and when the rules or the CA change, neither of which happens
	// during the run; the narrowing is checked again at the end.
	if err := narrowWebhook(ctx, cs, configurations[1].namespace); err != nil {
		return err
	}

	// Each configuration enforces exactly what it should, and only where it
	// should: checked with server-side dry runs, until the API server has
	// caught up with the configuration changes.
	if err := sanityCheck(ctx, cs); err != nil {
		return errors.Join(err, portal.LogTail())
	}
	logf("sanity: %d violations denied by (b) and (c), admitted by (a); the compliant pod admitted by all", len(violations))
	return nil
}

// warmUp makes the clients of the rounds and creates the unmeasured pods
// of each configuration with them.
func warmUp(ctx context.Context, restCfg *rest.Config, portal *benchstat.Child) ([]kubernetes.Interface, error) {
	workers := make([]kubernetes.Interface, clients)
	for i := range workers {
		var err error
		if workers[i], err = kubernetes.NewForConfig(restCfg); err != nil {
			return nil, err
		}
	}
	for _, c := range configurations {
		if _, errs := createPods(ctx, workers, c.namespace, "warmup-", warmupPods); len(errs) > 0 {
			return nil, fmt.Errorf("warm-up (%s): %w", c.key, errors.Join(append(errs, portal.LogTail())...))
		}
	}
	return workers, nil
}

// scrape reads Portal's and the API server's metrics.
func scrape(ctx context.Context, portal *benchstat.Child, cs kubernetes.Interface) (portalM, apiM benchstat.Metrics, err error) {
	if portalM, err = portal.Scrape(ctx); err != nil {
		return nil, nil, err
	}
	if apiM, err = scrapeAPIServer(ctx, cs); err != nil {
		return nil, nil, err
	}
	return portalM, apiM, nil
}

// measureRoundsAndMemory runs the rounds while sampling Portal's memory:
// idle before, peaks during, and the kernel's high-water mark after.
func measureRoundsAndMemory(ctx context.Context, workers []kubernetes.Interface, res *result, portal *benchstat.Child) (map[string][]time.Duration, map[string]time.Duration, error) {
	st, err := procStatus(portal.Pid())
	if err != nil {
		return nil, nil, err
	}
	res.rssIdle, res.anonIdle, res.fileIdle = st["VmRSS"], st["RssAnon"], st["RssFile"]
	sampler := benchstat.SamplePeaks(portal.Pid(), "VmRSS", "RssAnon", "RssFile")
	defer sampler.Stop()
	all, busy, err := measureRounds(ctx, workers, res, portal)
	if err != nil {
		return nil, nil, err
	}
	peaks := sampler.Stop()
	res.rssPeakSampled, res.anonPeakSampled, res.filePeakSampled = peaks["VmRSS"], peaks["RssAnon"], peaks["RssFile"]
	if st, err = procStatus(portal.Pid()); err != nil {
		return nil, nil, err
	}
	res.rssHWM = st["VmHWM"]
	res.loadAfter = loadAverage()
	return all, busy, nil
}

// measureRounds creates the measured pods and returns their latencies and
// the time each configuration was busy, by configuration key.
func measureRounds(ctx context.Context, workers []kubernetes.Interface, res *result, portal *benchstat.Child) (map[string][]time.Duration, map[string]time.Duration, error) {
	// The rounds: each configuration creates roundSize pods in turn, the
	// order rotating every round so that drifts in machine load and the
	// growing number of stored pods hit all three alike.
	res.rounds = (podsPerConfig + roundSize - 1) / roundSize
	logf("measuring: %d pods per configuration in %d rounds of %d, %d concurrent clients", res.rounds*roundSize, res.rounds, roundSize, clients)
	all := map[string][]time.Duration{}
	busy := map[string]time.Duration{}
	start := time.Now()
	for round := range res.rounds {
		for i := range configurations {
			c := configurations[(round+i)%len(configurations)]
			t0 := time.Now()
			lat, errs := createPods(ctx, workers, c.namespace, fmt.Sprintf("r%02d-", round), roundSize)
			busy[c.key] += time.Since(t0)
			all[c.key] = append(all[c.key], lat...)
			res.failures[c.key] = append(res.failures[c.key], errs...)
			for _, err := range errs {
				logf("round %d (%s): %v", round, c.key, err)
			}
			// A failed create is reported, not retried; more than 1% of
			// failures make the figures meaningless.
			if len(res.failures[c.key])*100 > podsPerConfig || ctx.Err() != nil {
				return nil, nil, fmt.Errorf("round %d (%s): too many failed creates: %w", round, c.key, errors.Join(append(errs, portal.LogTail())...))
			}
		}
	}
	res.elapsed = time.Since(start)
	return all, busy, nil
}

// handlerFigures checks that Portal saw exactly the pods of (b), and admitted
// them all (a create that failed on a webhook timeout may or may not have
// been decided), and fills in its in-handler decision times.
func handlerFigures(res *result, all map[string][]time.Duration, portalBefore, portalAfter benchstat.Metrics) error {
	nb := float64(len(all["b"]))
	late := float64(len(res.failures["b"]))
	const hist = "portal_admission_latency_seconds"
	res.handlerCount = delta(portalBefore, portalAfter, hist+"_count")
	allowed := delta(portalBefore, portalAfter, "portal_admission_requests_total", `decision="allowed"`)
	if res.handlerCount < nb || res.handlerCount > nb+late || allowed != res.handlerCount {
		return fmt.Errorf("portal decided %v requests (%v allowed) during the rounds, want %v: the webhook did not see exactly the pods of (b)", res.handlerCount, allowed, nb)
	}
	buckets := histogramDelta(portalBefore, portalAfter, hist)
	res.handlerP50, res.handlerP50Bound = histogramQuantile(0.50, buckets)
	res.handlerP99, res.handlerP99Bound = histogramQuantile(0.99, buckets)
	res.handlerMean = delta(portalBefore, portalAfter, hist+"_sum") / res.handlerCount
	return nil
}

// apiserverFigures fills in what the API server saw: the mean time of one
// call to Portal's webhook, and of the ValidatingAdmissionPolicy plugin per
// pod of (c).
func apiserverFigures(res *result, all map[string][]time.Duration, apiBefore, apiAfter benchstat.Metrics) {
	const webhookMetric = "apiserver_admission_webhook_admission_duration_seconds"
	whName := `name="` + portaladmission.WebhookName + `"`
	if n := delta(apiBefore, apiAfter, webhookMetric+"_count", whName); n > 0 {
		res.apiserverWebhookMean = delta(apiBefore, apiAfter, webhookMetric+"_sum", whName) / n
	}
	const pluginMetric = "apiserver_admission_controller_admission_duration_seconds_sum"
	if nc := float64(len(all["c"])); nc > 0 {
		res.apiserverVAPMean = delta(apiBefore, apiAfter, pluginMetric, `name="ValidatingAdmissionPolicy"`, `operation="CREATE"`) / nc
	}
}
