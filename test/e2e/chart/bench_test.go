package chart

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	portaladmission "github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/manifest"
)

// Sizes of BenchmarkChartAdmission: creates per configuration and round,
// concurrent clients, rounds (a and b alternate, so drift of the machine
// hits both).
const (
	benchPods    = 300
	benchClients = 8
	benchRounds  = 2
	benchWarmup  = 30
)

// BenchmarkChartAdmission is the admission benchmark's method on the real
// node: pod creates through kube-apiserver into (a) a namespace no webhook
// covers and (b) one Portal's webhook covers, with the chart installed
// (two replicas behind the Service, the Pod Security Standards bundle as
// PortalClusterRules), in the same run. It reports the p50 and p99 create
// latency of each, Portal's p99 overhead, and the peak RSS of each replica
// (process_resident_memory_bytes). The pods select no node, so they stay
// Pending: the benchmark measures admission, not the kubelet.
func BenchmarkChartAdmission(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	e.install(b)
	n, err := installPSS(ctx, e)
	if err != nil {
		b.Fatal(err)
	}
	nsA, nsB := e.workload, devtest2Namespace(b, e)
	// Portal's configuration covers every namespace but the system ones and
	// its own: narrow it to (b), so (a) has no webhook. Portal re-applies it
	// only when rules or the CA change, neither of which happens in the run.
	eventually(b, time.Minute, "the webhook configuration", func(ctx context.Context) (bool, error) {
		return narrowWebhook(ctx, e, nsB) == nil, nil
	})
	consistently(b, "(b) denying a privileged pod and (a) admitting it", 10, func() (bool, string) {
		errB := e.createDry(nsB, testPod("root", nil, true))
		errA := e.createDry(nsA, testPod("root", nil, true))
		return apierrors.IsForbidden(errB) && errA == nil, fmt.Sprintf("(b): %v, (a): %v", errB, errA)
	})
	b.Logf("chart installed: 2 replicas, %d rules; (a) %s without webhook, (b) %s with", n, nsA, nsB)

	rssPeak := map[string]float64{}
	var rssMu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			for pod, v := range e.scrape(b, "process_resident_memory_bytes") {
				rssMu.Lock()
				rssPeak[pod] = max(rssPeak[pod], v)
				rssMu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	lat := map[string][]time.Duration{}
	for _, ns := range []string{nsA, nsB} {
		if _, errs := createPending(ctx, e, ns, "warmup-", benchWarmup); len(errs) > 0 {
			b.Fatalf("warm-up in %s: %v", ns, errs[0])
		}
	}
	for r := range benchRounds {
		for _, c := range []struct{ key, ns string }{{"a", nsA}, {"b", nsB}} {
			d, errs := createPending(ctx, e, c.ns, fmt.Sprintf("r%d-", r), benchPods)
			if len(errs) > 0 {
				b.Fatalf("(%s) round %d: %d creates failed, first: %v", c.key, r, len(errs), errs[0])
			}
			lat[c.key] = append(lat[c.key], d...)
		}
	}
	close(stop)
	<-sampled
	if err := narrowWebhook(ctx, e, nsB); err != nil {
		b.Fatalf("the webhook configuration changed during the run: %v", err)
	}
	b.ReportMetric(0, "ns/op")
	for _, k := range []string{"a", "b"} {
		b.ReportMetric(ms(pct(lat[k], 50)), k+"-p50-ms")
		b.ReportMetric(ms(pct(lat[k], 99)), k+"-p99-ms")
	}
	b.ReportMetric(ms(pct(lat["b"], 99)-pct(lat["a"], 99)), "portal-overhead-p99-ms")
	var peak float64
	for pod, v := range rssPeak {
		b.Logf("replica %s: peak RSS %.1f MiB", pod, v/(1<<20))
		peak = max(peak, v)
	}
	b.ReportMetric(peak/(1<<20), "rss-per-replica-peak-MiB")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the nearest-rank percentile p of d.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)]
}

// devtest2Namespace is a second workload namespace for the benchmark.
func devtest2Namespace(b *testing.B, e *env) string {
	ns, err := e.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-portal-"}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	return ns.Name
}

// installPSS creates the restricted and baseline Pod Security Standards
// rules as PortalClusterRules, as portal dev does.
func installPSS(ctx context.Context, e *env) (int, error) {
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
		if err := e.c.Create(ctx, &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: spec.Name}, Spec: spec}); err != nil {
			return 0, d.Errorf("install rule %q: %v", spec.Name, err)
		}
	}
	return len(docs), nil
}

// narrowWebhook points Portal's webhook at one namespace (a no-op when it
// already does).
func narrowWebhook(ctx context.Context, e *env, namespace string) error {
	patch := fmt.Sprintf(`[
		{"op": "test", "path": "/webhooks/0/name", "value": %q},
		{"op": "replace", "path": "/webhooks/0/namespaceSelector", "value":
			{"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": [%q]}]}}
	]`, portaladmission.WebhookName, namespace)
	_, err := e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, releaseName,
		types.JSONPatchType, []byte(patch), metav1.PatchOptions{FieldManager: "bench-chart"})
	return err
}

// pendingPod meets the restricted standard and selects no node.
func pendingPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"portal.io/bench": "no-such-node"},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "app", Image: devcluster.HelloImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// createPending creates n pods from benchClients clients and returns the
// latency of each successful create.
func createPending(ctx context.Context, e *env, ns, prefix string, n int) ([]time.Duration, []error) {
	lat := make([]time.Duration, n)
	failed := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				_, err := e.cs.CoreV1().Pods(ns).Create(ctx, pendingPod(fmt.Sprintf("%s%04d", prefix, i)), metav1.CreateOptions{})
				lat[i] = time.Since(t0)
				failed[i] = err
			}
		})
	}
	wg.Wait()
	var ok []time.Duration
	var errs []error
	for i := range n {
		if failed[i] != nil {
			errs = append(errs, failed[i])
		} else {
			ok = append(ok, lat[i])
		}
	}
	return ok, errs
}

// scrape reads one unlabelled metric from each Portal pod's metrics port.
func (e *env) scrape(t testing.TB, metric string) map[string]float64 {
	out := map[string]float64{}
	for _, p := range e.portalPods(t) {
		if p.Status.PodIP == "" {
			continue
		}
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + net.JoinHostPort(p.Status.PodIP, "8443") + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), metric+" "); ok {
				if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
					out[p.Name] = v
				}
			}
		}
		resp.Body.Close()
	}
	return out
}
