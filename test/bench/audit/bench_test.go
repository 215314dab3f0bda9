//go:build linux

package audit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
	"github.com/vilaca/portal/test/bench/benchstat"
)

// Settings, each overridable by an environment variable.
var (
	totalPods    = envInt("PORTAL_BENCH_AUDIT_PODS", 10000)       // pods created
	violatingPct = envInt("PORTAL_BENCH_AUDIT_VIOLATING_PCT", 20) // percent of them violating
	namespaces   = envInt("PORTAL_BENCH_AUDIT_NAMESPACES", 10)    // spread over this many namespaces
	clients      = envInt("PORTAL_BENCH_CLIENTS", 8)              // concurrent clients
)

// portalNamespace is Portal's own namespace.
const portalNamespace = "portal-bench"

var policyReports = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}

// result is what one run measured.
type result struct {
	pods, violating, failed int
	createElapsed           time.Duration
	settleElapsed           time.Duration
	// Observed by the benchmark, from the create request being sent.
	toReport, toAlert latencies
	// Measured by Portal, portal_audit_event_to_report_seconds by sink:
	// estimate and the upper bound of its bucket.
	histP50, histP99, histP50Bound, histP99Bound map[string]float64
	histCount                                    map[string]float64
	// Portal's memory (kB).
	rssIdle, rssPeakSampled, rssHWM int64
	anonPeakSampled                 int64
	// API server writes during the run, by verb/resource, pods excluded.
	writes               map[string]float64
	portalWrites         float64 // writes not to pods nor leases
	reportWritesByPortal float64 // portal_policyreport_writes_total delta
	// reportApplyMean is the API server's mean time to serve one report
	// apply, from apiserver_request_duration_seconds.
	reportApplyMean time.Duration
	// applyP50, applyP99: Portal's portal_policyreport_write_duration_seconds
	// for applies, interpolated within buckets.
	applyP50, applyP99    float64
	evaluations           float64
	loadBefore, loadAfter string
}

// BenchmarkAudit creates pods through a real kube-apiserver while Portal
// audits them (no admission webhook), and reports how long each violation
// takes to reach the namespace's PolicyReport and Alertmanager, Portal's
// memory and the API server writes Portal caused. See doc.go. Each call is
// one whole run on a fresh control plane, whatever b.N.
func BenchmarkAudit(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a control plane, Alertmanager, and creates thousands of pods")
	}
	r, err := run(b)
	if err != nil {
		b.Fatal(err)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(r.toReport.P50), "report-p50-ms")
	b.ReportMetric(ms(r.toReport.P99), "report-p99-ms")
	b.ReportMetric(ms(r.toAlert.P50), "alert-p50-ms")
	b.ReportMetric(ms(r.toAlert.P99), "alert-p99-ms")
	b.ReportMetric(float64(max(r.rssHWM, r.rssPeakSampled))/1024, "portal-rss-peak-MiB")
	b.ReportMetric(r.portalWrites, "portal-api-writes")
}

func logf(format string, args ...any) { fmt.Printf("bench-audit: "+format+"\n", args...) }

func run(b *testing.B) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	res := &result{loadBefore: loadAverage(), writes: map[string]float64{}}

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
	restCfg, cs, dyn, cl, err := newClients(cluster)
	if err != nil {
		return nil, err
	}
	nsNames, err := createNamespaces(ctx, cs)
	if err != nil {
		return nil, err
	}
	nRules, err := installRules(ctx, cl)
	if err != nil {
		return nil, err
	}

	logf("starting alertmanager from bin/alertmanager")
	am, err := amtest.New(b.TempDir())
	if err != nil {
		return nil, err
	}
	defer am.Stop()

	portal, err := startPortal(b, cluster, am.URL())
	if err != nil {
		return nil, err
	}
	defer portal.Stop()
	if err := portal.WaitReady(ctx, cl, nRules, auditLeads(portal)); err != nil {
		return nil, err
	}
	logf("portal running as pid %d with %d rules, audit only, sinks: policyreport, alertmanager (%s), prometheus, stdout", portal.Pid(), nRules, am.URL())

	obs := startObservers(ctx, dyn, am)
	defer obs.stop()

	pods, sc, err := measure(ctx, restCfg, cs, portal, obs, nsNames, res)
	if err != nil {
		return nil, err
	}

	if err := latencyFigures(res, obs, pods); err != nil {
		return nil, err
	}
	portalFigures(res, sc)
	writeFigures(res, sc.apiBefore, sc.apiAfter)

	report(os.Stdout, res)
	return res, nil
}

// scrapes are Portal's and the API server's metrics before and after the
// pods.
type scrapes struct {
	portalBefore, portalAfter, apiBefore, apiAfter benchstat.Metrics
}

// measure creates the pods and waits for their findings while sampling
// Portal's memory, then stops the observers and reads what Portal and the
// API server counted.
func measure(ctx context.Context, restCfg *rest.Config, cs kubernetes.Interface, portal *benchstat.Child, obs *observers, nsNames []string, res *result) (*podRun, scrapes, error) {
	var sc scrapes
	var err error
	sc.portalBefore, sc.apiBefore, err = scrape(ctx, portal, cs)
	if err != nil {
		return nil, scrapes{}, err
	}
	st, err := procStatus(portal.Pid())
	if err != nil {
		return nil, scrapes{}, err
	}
	res.rssIdle = st["VmRSS"]
	sampler := benchstat.SamplePeaks(portal.Pid(), "VmRSS", "RssAnon")
	defer sampler.Stop()

	pods, err := createPodsAndCount(ctx, restCfg, nsNames, res)
	if err != nil {
		return nil, scrapes{}, err
	}
	if err := waitForFindings(ctx, portal, obs, pods, sc.portalBefore, res.pods); err != nil {
		return nil, scrapes{}, err
	}
	res.settleElapsed = time.Since(pods.start)
	waitSinksQuiet(ctx, portal)
	peaks := sampler.Stop()
	obs.stop()
	if err := heapProfile(ctx, portal); err != nil {
		return nil, scrapes{}, err
	}
	res.rssPeakSampled, res.anonPeakSampled = peaks["VmRSS"], peaks["RssAnon"]
	if st, err = procStatus(portal.Pid()); err != nil {
		return nil, scrapes{}, err
	}
	res.rssHWM = st["VmHWM"]
	res.loadAfter = loadAverage()
	sc.portalAfter, sc.apiAfter, err = scrape(ctx, portal, cs)
	if err != nil {
		return nil, scrapes{}, err
	}
	return pods, sc, nil
}

// newClients returns the clients of the run, without client-side rate limit.
func newClients(cluster *devcluster.Cluster) (*rest.Config, kubernetes.Interface, dynamic.Interface, client.Client, error) {
	restCfg := rest.CopyConfig(cluster.Config)
	restCfg.QPS, restCfg.Burst = -1, 0
	restCfg.WarningHandler = rest.NoWarnings{}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	scheme, err := manager.Scheme()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	cl, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if v, err := cs.Discovery().ServerVersion(); err == nil {
		logf("kube-apiserver %s", v.GitVersion)
	}
	return restCfg, cs, dyn, cl, nil
}

// createNamespaces creates Portal's namespace and those of the pods, and
// returns the latter.
func createNamespaces(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	nsNames := []string{}
	for i := range namespaces {
		nsNames = append(nsNames, fmt.Sprintf("bench-audit-%d", i))
	}
	for _, ns := range append([]string{portalNamespace}, nsNames...) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	return nsNames, nil
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

// podRun is what creating the pods gave: when each create was sent, which
// failed, and the violating pods that were created.
type podRun struct {
	nsNames []string
	sent    []time.Time
	failed  []error
	want    []int
	start   time.Time
}

// key is pod i's namespace/name.
func (p *podRun) key(i int) string { return fmt.Sprintf("%s/pod-%05d", p.nsNames[i%namespaces], i) }

// isViolating says whether pod i violates the rules: every pod i with
// i%100 < violatingPct does, the others comply.
func isViolating(i int) bool { return i%100 < violatingPct }

// createPodsAndCount creates the pods, pod i in namespace i%namespaces, and
// counts in res those created, failed and violating.
func createPodsAndCount(ctx context.Context, restCfg *rest.Config, nsNames []string, res *result) (*podRun, error) {
	logf("creating %d pods (%d%% violating) over %d namespaces with %d concurrent clients", totalPods, violatingPct, namespaces, clients)
	p := &podRun{nsNames: nsNames, sent: make([]time.Time, totalPods), failed: make([]error, totalPods)}
	workers := make([]kubernetes.Interface, clients)
	for i := range workers {
		var err error
		if workers[i], err = kubernetes.NewForConfig(restCfg); err != nil {
			return nil, err
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	p.start = time.Now()
	for _, w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= totalPods {
					return
				}
				ns := nsNames[i%namespaces]
				pod := compliantPod(ns, fmt.Sprintf("pod-%05d", i))
				if isViolating(i) {
					violations[(i/100*violatingPct+i%100)%len(violations)](pod)
				}
				p.sent[i] = time.Now()
				if _, err := w.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					p.failed[i] = err
				}
			}
		})
	}
	wg.Wait()
	res.createElapsed = time.Since(p.start)
	for i := range totalPods {
		if p.failed[i] != nil {
			res.failed++
			if res.failed <= 5 {
				logf("create %s: %v", p.key(i), p.failed[i])
			}
			continue
		}
		res.pods++
		if isViolating(i) {
			p.want = append(p.want, i)
		}
	}
	res.violating = len(p.want)
	if res.failed*100 > totalPods {
		return nil, fmt.Errorf("%d of %d creates failed", res.failed, totalPods)
	}
	logf("created %d pods in %s (%.0f/s); waiting for %d violations in reports and alerts", res.pods, res.createElapsed.Round(time.Millisecond), float64(res.pods)/res.createElapsed.Seconds(), len(p.want))
	return p, nil
}

// waitForFindings waits for every violating pod in both reports and alerts,
// then for Portal to be idle: its queue empty, each created pod evaluated.
func waitForFindings(ctx context.Context, portal *benchstat.Child, obs *observers, pods *podRun, portalBefore benchstat.Metrics, created int) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-obs.watchErr:
			return false, fmt.Errorf("policyreport watch: %w", err)
		default:
		}
		r, a := 0, 0
		for _, i := range pods.want {
			if _, ok := obs.report.get(pods.key(i)); ok {
				r++
			}
			if _, ok := obs.alert.get(pods.key(i)); ok {
				a++
			}
		}
		last = fmt.Sprintf("%d/%d in reports, %d/%d in alerts", r, len(pods.want), a, len(pods.want))
		if r < len(pods.want) || a < len(pods.want) {
			return false, nil
		}
		m, err := portal.Scrape(ctx)
		if err != nil {
			return false, nil
		}
		evals := delta(portalBefore, m, "portal_audit_evaluations_total")
		last += fmt.Sprintf(", %v evaluations, queue %v", evals, m.Sum("portal_audit_queue_depth"))
		return m.Sum("portal_audit_queue_depth") == 0 && evals >= float64(created), nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("waiting for the findings (%s): %w", last, err), portal.LogTail())
	}
	return nil
}

// waitSinksQuiet waits (at most 30s) until the sinks have gone quiet, so
// that writes are counted only then: two scrapes a second apart that agree
// on the objects published.
func waitSinksQuiet(ctx context.Context, portal *benchstat.Child) {
	prevPublished := -1.0
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, false, func(ctx context.Context) (bool, error) {
		m, err := portal.Scrape(ctx)
		if err != nil {
			return false, nil
		}
		cur := m.Sum("portal_audit_sink_objects_total")
		quiet := cur == prevPublished
		prevPublished = cur
		return quiet, nil
	})
}

// latencyFigures checks that no compliant pod showed up, and fills in the
// times from each violating pod's create to its report and its alert.
func latencyFigures(res *result, obs *observers, pods *podRun) error {
	for i := range totalPods {
		if isViolating(i) || pods.failed[i] != nil {
			continue
		}
		if _, ok := obs.report.get(pods.key(i)); ok {
			return fmt.Errorf("compliant pod %s appeared in a PolicyReport", pods.key(i))
		}
		if _, ok := obs.alert.get(pods.key(i)); ok {
			return fmt.Errorf("compliant pod %s raised an alert", pods.key(i))
		}
	}
	var toReport, toAlert []time.Duration
	for _, i := range pods.want {
		t, _ := obs.report.get(pods.key(i))
		toReport = append(toReport, t.Sub(pods.sent[i]))
		t, _ = obs.alert.get(pods.key(i))
		toAlert = append(toAlert, t.Sub(pods.sent[i]))
	}
	res.toReport, res.toAlert = summarise(toReport), summarise(toAlert)
	printSlowest(envInt("PORTAL_BENCH_AUDIT_SLOWEST", 0), pods.want, toReport, toAlert, func(i int) string {
		return fmt.Sprintf("%s sent +%v", pods.key(i), pods.sent[i].Sub(pods.start).Round(time.Millisecond))
	})
	return nil
}

// portalFigures fills in what Portal measured: event-to-report time by
// sink, evaluations, report writes and their durations.
func portalFigures(res *result, sc scrapes) {
	portalBefore, portalAfter, apiBefore, apiAfter := sc.portalBefore, sc.portalAfter, sc.apiBefore, sc.apiAfter
	res.histP50, res.histP99, res.histP50Bound, res.histP99Bound, res.histCount = map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}
	const hist = "portal_audit_event_to_report_seconds"
	for _, s := range []string{"policyreport", "alertmanager"} {
		bk := histogramDeltaWith(portalBefore, portalAfter, hist, `sink="`+s+`"`)
		res.histP50[s], res.histP50Bound[s] = histogramQuantile(0.50, bk)
		res.histP99[s], res.histP99Bound[s] = histogramQuantile(0.99, bk)
		res.histCount[s] = delta(portalBefore, portalAfter, hist+"_count", `sink="`+s+`"`)
	}
	res.evaluations = delta(portalBefore, portalAfter, "portal_audit_evaluations_total")
	res.reportWritesByPortal = delta(portalBefore, portalAfter, "portal_policyreport_writes_total")
	applyFilter := []string{`resource="policyreports"`, `verb="APPLY"`}
	if n := delta(apiBefore, apiAfter, "apiserver_request_duration_seconds_count", applyFilter...); n > 0 {
		sum := delta(apiBefore, apiAfter, "apiserver_request_duration_seconds_sum", applyFilter...)
		res.reportApplyMean = time.Duration(sum / n * float64(time.Second))
	}
	applies := histogramDeltaWith(portalBefore, portalAfter, "portal_policyreport_write_duration_seconds", `op="apply"`)
	res.applyP50, _ = histogramQuantile(0.50, applies)
	res.applyP99, _ = histogramQuantile(0.99, applies)
}

// writeFigures counts the API server writes, from apiserver_request_total:
// every mutating verb, by resource. The benchmark writes only pods; the API
// server itself renews its identity lease; everything else is Portal's.
func writeFigures(res *result, apiBefore, apiAfter benchstat.Metrics) {
	for _, s := range apiAfter["apiserver_request_total"] {
		verb, resource, sub := label(s.Labels, "verb"), label(s.Labels, "resource"), label(s.Labels, "subresource")
		if !slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"}, verb) || resource == "pods" {
			continue
		}
		var before float64
		for _, p := range apiBefore["apiserver_request_total"] {
			if p.Labels == s.Labels {
				before = p.Value
			}
		}
		if d := s.Value - before; d > 0 {
			k := verb + " " + resource
			if sub != "" {
				k += "/" + sub
			}
			res.writes[k] += d
			if resource != "leases" {
				res.portalWrites += d
			}
		}
	}
}

// label returns the value of label name in a Prometheus label text.
func label(labels, name string) string {
	_, v, ok := strings.Cut(","+labels, ","+name+`="`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// histogramDeltaWith is histogramDelta restricted to samples whose labels
// contain with.
func histogramDeltaWith(before, after metrics, name, with string) []bucket {
	filter := func(m metrics) metrics {
		out := metrics{}
		for _, s := range m[name+"_bucket"] {
			if strings.Contains(s.Labels, with) {
				out[name+"_bucket"] = append(out[name+"_bucket"], s)
			}
		}
		return out
	}
	return histogramDelta(filter(before), filter(after), name)
}

// installRules creates one PortalClusterRule per rule of the restricted
// bundle (baseline and restricted, mode [admission, audit]), as `portal dev`
// does.
func installRules(ctx context.Context, cl client.Client) (int, error) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return 0, err
	}
	docs, err := manifest.ReadPaths([]string{filepath.Join(root, "examples", "rules", "pod-security")}, nil)
	if err != nil {
		return 0, err
	}
	for _, d := range docs {
		var spec policyv1alpha1.RuleSpec
		if err := yaml.UnmarshalStrict(d.Data, &spec); err != nil {
			return 0, d.Errorf("not a plain rule: %v", err)
		}
		if !slices.Contains(spec.Mode, policyv1alpha1.Mode("audit")) {
			return 0, d.Errorf("rule %q has no audit mode", spec.Name)
		}
		pcr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: spec.Name}, Spec: spec}
		if err := cl.Create(ctx, pcr); err != nil {
			return 0, d.Errorf("install rule %q: %v", spec.Name, err)
		}
	}
	return len(docs), nil
}
