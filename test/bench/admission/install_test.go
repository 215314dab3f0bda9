//go:build linux

package admission_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	portaladmission "github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/manifest"
)

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
