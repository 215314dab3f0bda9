//go:build linux

package manager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/test/bench/benchstat"
)

// The shape of BenchmarkChangeToPolicyReport: the re-evaluation benchmark's
// (internal/lookup BenchmarkChangeToFinding), 100 namespaces of 10
// (Deployment, PodDisruptionBudget) pairs, so the two can be compared.
const (
	changeNamespaces = 100
	changePairsPerNS = 10
	changeRule       = "require-pdb-per-deployment"
)

// fillerRule makes Portal cache the filler ConfigMaps: audit watches the
// kinds its rules match, through the shared cluster cache. It never fails
// on the benchmark's ConfigMaps, so they add cache, not findings.
const fillerRule = `name: configmap-entries
severity: low
mode: [audit]
match:
  gvk: [{version: v1, kind: ConfigMap}]
rule: len(object.data ?? {}) > 1000
message: ConfigMap {{ metadata.namespace }}/{{ metadata.name }} has over 1,000 entries
`

// changeObjects are created once per test process: -count runs the
// benchmark again against the same API server.
var changeObjects struct {
	once sync.Once
	err  error
}

// BenchmarkChangeToPolicyReport measures issue 11's end-to-end figure: from
// a referenced object's change to the dependent finding updated in its
// PolicyReport, through the real kube-apiserver, the shared cluster cache,
// the lookup dependency index, audit, the findings pipeline and the
// PolicyReport sink. The cookbook's require-pdb-per-deployment rule runs
// over 1,000 (Deployment, PodDisruptionBudget) pairs while the cache holds
// PORTAL_BENCH_CHANGE_OBJECTS objects (100,000 by default; the rest are
// ConfigMaps). Each iteration deletes one pair's PodDisruptionBudget, times
// until its Deployment's failing result is in the namespace's PolicyReport,
// re-creates it and times until the result is gone. Both times start when
// the request is sent and end when a watch on the PolicyReports delivers
// the change.
func BenchmarkChangeToPolicyReport(b *testing.B) {
	total := benchstat.EnvInt("PORTAL_BENCH_CHANGE_OBJECTS", 100_000)
	pairs := changeNamespaces * changePairsPerNS
	ctx := context.Background()
	cl := shared.Cluster(b)
	cfg := rest.CopyConfig(cl.Config)
	cfg.QPS, cfg.Burst = -1, 0 // client-go's default 5/s would take hours
	cs := kubernetes.NewForConfigOrDie(cfg)
	changeObjects.once.Do(func() {
		start := time.Now()
		changeObjects.err = createChangeObjects(ctx, cs, max(0, total-2*pairs))
		b.Logf("created %d objects in %s (load average %s)", total, time.Since(start).Round(time.Second), benchstat.LoadAverage())
	})
	if changeObjects.err != nil {
		b.Fatal(changeObjects.err)
	}
	p := startChangePortal(b, cl, dynamic.NewForConfigOrDie(cfg), total, pairs)

	// Consecutive changes go to different namespaces, as changes spread
	// over a cluster would; a namespace's turn comes again after 100. Each
	// change re-evaluates the namespace's 10 Deployments twice (delete,
	// create); the cycle guard defers a pair's re-evaluations past
	// CycleLimit per CycleWindow to the end of its window, so a namespace
	// is changed again only once its window has passed: what is measured
	// is the path, not the guard.
	if p.cfg.Lookup.CycleLimit < 2 {
		b.Fatalf("cycle limit %d: a change re-evaluates a pair twice", p.cfg.Lookup.CycleLimit)
	}
	var raise, cleared []time.Duration
	visited := map[string]time.Time{}
	paced := time.Duration(0)
	k := 0
	for b.Loop() {
		i := k % pairs
		k++
		ns, name := changeNS(i%changeNamespaces), fmt.Sprint("web-", (i/changeNamespaces)%changePairsPerNS)
		if pause := p.cfg.Lookup.CycleWindow + time.Second - time.Since(visited[ns]); pause > 0 {
			b.StopTimer()
			paced += pause
			time.Sleep(pause) // pacing below the cycle guard's rate, not synchronisation
			b.StartTimer()
		}
		visited[ns] = time.Now()
		r, c := changePair(ctx, b, cs, p.findings, ns, name)
		raise, cleared = append(raise, r), append(cleared, c)
	}
	b.StopTimer()
	if n := counter(b, p.reg, "portal_lookup_cycle_suppressed_total"); n != 0 {
		b.Fatalf("the cycle guard suppressed %v re-evaluations: the pacing is wrong and the figures are not the path's", n)
	}
	select {
	case err := <-p.watchErr:
		b.Fatalf("PolicyReport watch: %v", err)
	default:
	}
	reportChanges(b, p, raise, cleared)
	b.Logf("%d pairs; %s paced", pairs, paced.Round(time.Second))
}

// changePortal is Portal running for the benchmark, settled.
type changePortal struct {
	cfg      Config
	reg      *prometheus.Registry
	findings *findingWatch
	watchErr <-chan error
	// cached and deps are the cache's objects and the dependency index's
	// entries once settled.
	cached, deps float64
}

// startChangePortal runs Portal (audit only, the cookbook rule and the
// filler rule) until b ends, and waits until it has settled: the leader has
// published the full state, the cache holds every object, every Deployment
// has been evaluated (one dependency each) and nothing is queued. Every
// pair has its PDB then, so no Deployment has a finding.
func startChangePortal(b *testing.B, cl *devcluster.Cluster, dyn dynamic.Interface, total, pairs int) *changePortal {
	b.Helper()
	dir := b.TempDir()
	root, err := devcluster.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	rule, err := os.ReadFile(filepath.Join(root, "examples", "rules", "cross-resource", changeRule+".yaml"))
	if err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string][]byte{changeRule + ".yaml": rule, "filler.yaml": []byte(fillerRule)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	p := &changePortal{findings: newFindingWatch()}
	p.cfg, p.reg, _ = layerConfig(b, "change-bench")
	p.cfg.Audit.Enabled = true
	p.cfg.Audit.ResyncPeriod = time.Hour // every re-evaluation measured is an event
	if err := p.cfg.Sinks.Parse("--report-format=wgpolicyk8s"); err != nil {
		b.Fatal(err)
	}
	p.cfg.RulesFolder = dir

	watchCtx, stopWatch := context.WithCancel(context.Background())
	b.Cleanup(stopWatch)
	watchErr := make(chan error, 1)
	p.watchErr = watchErr
	go func() { watchErr <- p.findings.run(watchCtx, dyn) }()

	runUntilReady(b, cl, p.cfg)
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 15*time.Minute, true, func(context.Context) (bool, error) {
		p.cached, p.deps = counter(b, p.reg, "portal_cluster_cache_objects"), counter(b, p.reg, "portal_lookup_dependencies")
		return counter(b, p.reg, "portal_audit_leader") == 1 && p.cached >= float64(total) && p.deps >= float64(pairs) &&
			counter(b, p.reg, "portal_audit_queue_depth") == 0 && p.findings.failing() == 0, nil
	})
	if err != nil {
		b.Fatalf("Portal never settled: %v cached objects (want %d), %v dependencies (want %d), %d failing Deployments: %v",
			p.cached, total, p.deps, pairs, p.findings.failing(), err)
	}
	b.Logf("settled: %v cached objects, %v dependencies (load average %s)", p.cached, p.deps, benchstat.LoadAverage())
	return p
}

// changePair deletes the pair's PDB and times until its Deployment's
// finding is in the report, then re-creates it and times until the finding
// is gone. Both times start when the request is sent.
func changePair(ctx context.Context, b *testing.B, cs kubernetes.Interface, fw *findingWatch, ns, name string) (raise, gone time.Duration) {
	key := ns + "/" + name
	start := time.Now()
	if err := cs.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	at, err := fw.await(ctx, key, true, start)
	if err != nil {
		b.Fatalf("%s: finding never raised after its PDB was deleted: %v", key, err)
	}
	raise = at.Sub(start)
	start = time.Now()
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, changePDB(name), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if at, err = fw.await(ctx, key, false, start); err != nil {
		b.Fatalf("%s: finding never cleared after its PDB was re-created: %v", key, err)
	}
	return raise, at.Sub(start)
}

// reportChanges reports the latencies as metrics and logs the figures
// docs/performance.md quotes.
func reportChanges(b *testing.B, p *changePortal, raise, cleared []time.Duration) {
	all := benchstat.Summarise(slices.Concat(raise, cleared))
	r, c := benchstat.Summarise(raise), benchstat.Summarise(cleared)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(all.P50), "p50-ms")
	b.ReportMetric(ms(all.P99), "p99-ms")
	b.ReportMetric(ms(r.P99), "raise-p99-ms")
	b.ReportMetric(ms(c.P99), "clear-p99-ms")
	b.ReportMetric(p.cached, "cached-objects")
	b.Logf("%s; load average %s; %d changes, %v cached objects, %v dependencies", benchstat.Machine(), benchstat.LoadAverage(), all.N, p.cached, p.deps)
	for _, x := range []struct {
		what string
		l    benchstat.Latencies
	}{{"PDB deleted -> finding in the report", r}, {"PDB created -> finding gone from the report", c}, {"both", all}} {
		b.Logf("%s: n %d, mean %.1f ms, p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms", x.what, x.l.N, ms(x.l.Mean), ms(x.l.P50), ms(x.l.P95), ms(x.l.P99), ms(x.l.Max))
	}
	b.Logf("portal_lookup_requeues_total %v, portal_lookup_cycle_suppressed_total %v, portal_audit_rule_errors_total %v, portal_policyreport_writes_total %v",
		counter(b, p.reg, "portal_lookup_requeues_total"), counter(b, p.reg, "portal_lookup_cycle_suppressed_total"),
		counter(b, p.reg, "portal_audit_rule_errors_total"), counter(b, p.reg, "portal_policyreport_writes_total"))
}

func changeNS(i int) string { return fmt.Sprintf("change-%03d", i) }

// createChangeObjects creates the pairs and filler ConfigMaps spread over
// the pair namespaces, with a pool of workers; objects already there (an
// earlier run against the same API server) are kept.
func createChangeObjects(ctx context.Context, cs kubernetes.Interface, filler int) error {
	for n := range changeNamespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: changeNS(n)}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Defaults().Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	work := make(chan func() error)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for create := range work {
				if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	send := func(f func() error) bool {
		select {
		case work <- f:
			return true
		case err := <-errs:
			errs <- err
			return false
		}
	}
	func() {
		defer close(work)
		for n := range changeNamespaces {
			ns := changeNS(n)
			for p := range changePairsPerNS {
				name := fmt.Sprint("web-", p)
				if !send(func() error {
					_, err := cs.AppsV1().Deployments(ns).Create(ctx, changeDeployment(name), metav1.CreateOptions{})
					return err
				}) || !send(func() error {
					_, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, changePDB(name), metav1.CreateOptions{})
					return err
				}) {
					return
				}
			}
		}
		for i := range filler {
			ns := changeNS(i % changeNamespaces)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("fill-", i)}, Data: map[string]string{"index": fmt.Sprint(i)}}
			if !send(func() error {
				_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
				return err
			}) {
				return
			}
		}
	}()
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("create the benchmark's objects: %w", err)
	default:
		return nil
	}
}

// changeDeployment runs two replicas (the rule ignores one) of pods
// labelled app=<name>; without a controller manager no pod is created.
func changeDeployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](2),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}},
		},
	}}
}

// changePDB selects the pods of its Deployment alone.
func changePDB(name string) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(1)),
		Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
	}}
}
