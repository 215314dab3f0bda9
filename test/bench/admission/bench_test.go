//go:build linux

package admission_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	portaladmission "github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/manifest"
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

// installPolicy creates the ValidatingAdmissionPolicy and its binding. The
// policy's status.typeChecking stays empty here: the controller that fills
// it runs in kube-controller-manager, which this control plane does not
// have. The API server compiles the expressions at create time (a syntax
// error is rejected) and the sanity check shows they work.
func installPolicy(ctx context.Context, cs kubernetes.Interface) error {
	arv1 := cs.AdmissionregistrationV1()
	if _, err := arv1.ValidatingAdmissionPolicies().Create(ctx, validatingAdmissionPolicy(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the ValidatingAdmissionPolicy (is admissionregistration.k8s.io/v1 served?): %w", err)
	}
	if _, err := arv1.ValidatingAdmissionPolicyBindings().Create(ctx, validatingAdmissionPolicyBinding(configurations[2].namespace), metav1.CreateOptions{}); err != nil {
		return err
	}
	return nil
}

// installRules creates one PortalClusterRule per rule of the restricted
// bundle, as `portal dev` does.
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
		pcr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: spec.Name}, Spec: spec}
		if err := cl.Create(ctx, pcr); err != nil {
			return 0, d.Errorf("install rule %q: %v", spec.Name, err)
		}
	}
	return len(docs), nil
}

// narrowWebhook points Portal's webhook at one namespace.
func narrowWebhook(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	patch := fmt.Sprintf(`[
		{"op": "test", "path": "/webhooks/0/name", "value": %q},
		{"op": "replace", "path": "/webhooks/0/namespaceSelector", "value":
			{"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [%q]}]}}
	]`, portaladmission.WebhookName, namespace)
	_, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, portaladmission.ConfigName,
		types.JSONPatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench-admission"})
	if err != nil {
		return fmt.Errorf("narrow portal's webhook to %s: %w", namespace, err)
	}
	return nil
}

// checkNarrowed fails when Portal's webhook no longer selects only
// namespace (Portal re-applied its configuration during the run).
func checkNarrowed(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, portaladmission.ConfigName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	sel := vwc.Webhooks[0].NamespaceSelector
	if sel == nil || len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Operator != metav1.LabelSelectorOpIn ||
		!slices.Equal(sel.MatchExpressions[0].Values, []string{namespace}) {
		return fmt.Errorf("portal's webhook configuration changed during the run: namespaceSelector %v", sel)
	}
	return nil
}

var ruleTag = regexp.MustCompile(`\[(pss-[a-z-]+)\]`)

// tags returns the rule names in a denial, deduplicated, in order.
func tags(msg string) []string {
	var out []string
	for _, m := range ruleTag.FindAllStringSubmatch(msg, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// sanityCheck dry-runs the compliant pod and every violation in the three
// namespaces, retrying for a while: the API server applies webhook and
// policy changes a moment after they are written.
func sanityCheck(ctx context.Context, cs kubernetes.Interface) error {
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	check := func(ctx context.Context) error {
		var errs []error
		for _, c := range configurations {
			if _, err := cs.CoreV1().Pods(c.namespace).Create(ctx, compliantPod(c.namespace, "sanity-ok"), dry); err != nil {
				errs = append(errs, fmt.Errorf("(%s) compliant pod: %w", c.key, err))
			}
		}
		for _, v := range violations {
			for _, c := range configurations {
				pod := compliantPod(c.namespace, "sanity-bad")
				v.mutate(pod)
				_, err := cs.CoreV1().Pods(c.namespace).Create(ctx, pod, dry)
				switch c.key {
				case "a":
					if err != nil {
						errs = append(errs, fmt.Errorf("(a) %v: want admitted, got %w", v.rules, err))
					}
				case "b":
					if !apierrors.IsForbidden(err) || !strings.Contains(fmt.Sprint(err), `admission webhook "`+portaladmission.WebhookName+`" denied`) {
						errs = append(errs, fmt.Errorf("(b) %v: want portal's denial, got %v", v.rules, err))
					} else if got := tags(err.Error()); !slices.Equal(got, v.rules) {
						errs = append(errs, fmt.Errorf("(b) %v: portal denied with rules %v: %v", v.rules, got, err))
					}
				case "c":
					if !apierrors.IsForbidden(err) || !strings.Contains(fmt.Sprint(err), "ValidatingAdmissionPolicy '"+vapName+"'") {
						errs = append(errs, fmt.Errorf("(c) %v: want the policy's denial, got %v", v.rules, err))
					} else if got := tags(err.Error()); !slices.Equal(got, v.rules[:1]) {
						errs = append(errs, fmt.Errorf("(c) %v: the policy denied with %v: %v", v.rules, got, err))
					}
				}
			}
		}
		return errors.Join(errs...)
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := check(ctx)
		if ctx.Err() == nil { // keep the last complete check
			last = err
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("sanity check: %w", last)
	}
	return nil
}

// createPods creates n compliant pods named prefix<i> in namespace with the
// clients working concurrently, and returns the latency of every successful
// create and the errors of the others.
func createPods(ctx context.Context, workers []kubernetes.Interface, namespace, prefix string, n int) ([]time.Duration, []error) {
	lat := make([]time.Duration, n)
	failed := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			pods := w.CoreV1().Pods(namespace)
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				pod := compliantPod(namespace, fmt.Sprintf("%s%04d", prefix, i))
				t0 := time.Now()
				_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
				lat[i] = time.Since(t0)
				if err != nil {
					failed[i] = fmt.Errorf("create %s/%s after %s: %w", namespace, pod.Name, lat[i].Round(time.Millisecond), err)
				}
			}
		})
	}
	wg.Wait()
	var ok []time.Duration
	var errs []error
	for i := range n {
		if failed[i] != nil {
			errs = append(errs, failed[i])
		} else if lat[i] > 0 {
			ok = append(ok, lat[i])
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return ok, errs
}

// report prints the results as Markdown.
func report(w io.Writer, r *result) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }
	a := r.latency["a"]
	fmt.Fprintf(w, "\nAdmission benchmark: %s; load average %s before, %s after; %d rounds in %s\n\n",
		machine(), r.loadBefore, r.loadAfter, r.rounds, r.elapsed.Round(time.Second))
	fmt.Fprintln(w, "| configuration | pods | failed | creates/s | mean ms | p50 ms | p95 ms | p99 ms | max ms | p50 over (a) | p95 over (a) | p99 over (a) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range configurations {
		l := r.latency[c.key]
		over := func(x, y time.Duration) string {
			if c.key == "a" {
				return "–"
			}
			return ms(x - y)
		}
		fmt.Fprintf(w, "| (%s) %s | %d | %d | %.0f | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.key, c.what, l.N, len(r.failures[c.key]), r.throughput[c.key],
			ms(l.Mean), ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max), over(l.P50, a.P50), over(l.P95, a.P95), over(l.P99, a.P99))
	}
	b, c := r.latency["b"], r.latency["c"]
	fmt.Fprintln(w)
	ratio := func(x, y time.Duration) string {
		if y <= 0 {
			return "n/a ((c) is not slower than (a))"
		}
		return fmt.Sprintf("%.2fx", float64(x)/float64(y))
	}
	fmt.Fprintf(w, "Portal's overhead / VAP's overhead: p50 %s, p95 %s, p99 %s\n",
		ratio(b.P50-a.P50, c.P50-a.P50), ratio(b.P95-a.P95, c.P95-a.P95), ratio(b.P99-a.P99, c.P99-a.P99))
	fmt.Fprintf(w, "Portal in-handler (portal_admission_latency_seconds, %v decisions): p50 ≈ %.0f µs (bucket ≤ %.0f µs), p99 ≈ %.0f µs (bucket ≤ %.0f µs), mean %.0f µs\n",
		r.handlerCount, r.handlerP50*1e6, r.handlerP50Bound*1e6, r.handlerP99*1e6, r.handlerP99Bound*1e6, r.handlerMean*1e6)
	if d := r.direct; d != nil {
		us := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }
		fmt.Fprintf(w, "Portal in-handler measured directly (%d calls in this process after the rounds, one at a time, on a stored pod of (b), %d bytes of JSON, %d of them managedFields): handler p50 %s µs, p99 %s µs, mean %s µs; of which rule evaluation p50 %s µs, p99 %s µs\n",
			d.handler.N, d.objectBytes, d.managedFieldsBytes, us(d.handler.P50), us(d.handler.P99), us(d.handler.Mean), us(d.evaluate.P50), us(d.evaluate.P99))
	}
	fmt.Fprintf(w, "kube-apiserver: mean call to Portal's webhook %.0f µs; ValidatingAdmissionPolicy plugin per pod of (c) %.0f µs\n",
		r.apiserverWebhookMean*1e6, r.apiserverVAPMean*1e6)
	peak := max(r.rssHWM, r.rssPeakSampled) // the kernel's RSS counters are approximate; take the larger
	mib := func(kb int64) float64 { return float64(kb) / 1024 }
	fmt.Fprintf(w, "Portal RSS: idle before the rounds %.1f MiB (anon %.1f, file %.1f); highest samples during them %.1f MiB (anon %.1f, file %.1f); VmHWM %.1f MiB; peak %.1f MiB = %.1f MB\n",
		mib(r.rssIdle), mib(r.anonIdle), mib(r.fileIdle), mib(r.rssPeakSampled), mib(r.anonPeakSampled), mib(r.filePeakSampled),
		mib(r.rssHWM), mib(peak), float64(peak)*1024/1e6)
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	for _, c := range configurations {
		for _, err := range r.failures[c.key] {
			fmt.Fprintf(w, "Failed create in (%s): %v\n", c.key, err)
		}
	}
	pOver, cOver := b.P99-a.P99, c.P99-a.P99
	fmt.Fprintf(w, "Targets: Portal p99 ≤ (a) + 2 ms: %s (%s ms); ≤ 1.5x VAP's p99 overhead: %s (%s vs %s ms); in-handler p99 < 1 ms: %s; peak RSS < 60 MB (10^6 bytes): %s\n",
		verdict(pOver <= 2*time.Millisecond), ms(pOver),
		verdict(float64(pOver) <= 1.5*float64(cOver)), ms(pOver), ms(cOver),
		verdict(r.handlerP99Bound <= 0.001), verdict(float64(peak)*1024 < 60e6))
}
