package chart

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/manager"
)

// env is what the steps of TestChartOnRealNode share.
type env struct {
	cl         *devcluster.Cluster
	cs         kubernetes.Interface
	c          client.Client
	kubeconfig string
	workload   string // a namespace Portal's webhook covers

	mu       sync.Mutex
	warnings []string
}

func (e *env) HandleWarningHeader(_ int, _ string, text string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.warnings = append(e.warnings, text)
}

func (e *env) takeWarnings() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.warnings
	e.warnings = nil
	return w
}

// newEnv connects to the shared node's cluster, with a namespace of the
// test's own as the workload namespace.
func newEnv(t testing.TB) *env {
	t.Helper()
	cl := shared.Cluster(t)
	e := &env{cl: cl}
	cfg := rest.CopyConfig(cl.Config)
	cfg.WarningHandler = e
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	e.cs = kubernetes.NewForConfigOrDie(cfg)
	scheme, err := manager.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if e.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	kc, err := cl.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	e.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(e.kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	e.workload = devtest.Namespace(t, cl)
	t.Cleanup(func() {
		if t.Failed() {
			e.dump(t)
		}
	})
	return e
}

// TestChartOnRealNode installs the chart with two replicas and walks
// through what an operator relies on, in order; each step needs the ones
// before it.
func TestChartOnRealNode(t *testing.T) {
	e := newEnv(t)
	for _, step := range []struct {
		name string
		run  func(*testing.T, *env)
	}{
		{"InstallTwoReplicasReady", testInstall},
		{"PrivilegedPodDeniedThroughService", testDeny},
		{"WarnRuleAdmitsWithWarning", testWarn},
		{"DryrunRuleAdmitsAndCounts", testDryrun},
		{"ExactlyOneLeaseHolder", testOneLeader},
		{"LeaderDeletedLeadershipMoves", testLeaderMoves},
		{"NoReplicaFailurePolicy", testFailClosed},
		{"UpgradeRollsWithoutLosingAdmission", testUpgrade},
		{"RestartSendsNoDuplicateAlert", testRestartNoDuplicateAlert},
		{"UninstallLeavesNothing", testUninstall},
	} {
		if !t.Run(step.name, func(t *testing.T) { step.run(t, e) }) {
			return
		}
	}
}

func (e *env) helm(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(helmBinary(t), append(args, "--kubeconfig", e.kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func testInstall(t *testing.T, e *env) { e.install(t) }

// install installs the chart with two replicas from the node's image, and
// the values of set, and waits for both replicas to be ready.
func (e *env) install(t testing.TB, set ...string) {
	t.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"install", releaseName, filepath.Join(root, "deploy", "helm", "portal"),
		"--namespace", releaseNS, "--create-namespace", "--wait", "--timeout", "4m",
		// Plain HTTP metrics, so the test reads the dryrun counter from each pod.
		"--set", "metrics.secure=false",
		// The dev node enforces no NetworkPolicy; the chart still needs the choice.
		"--set", "networkPolicy.webhookFromAnywhere=true"}
	for _, v := range append(imageValues(), set...) {
		args = append(args, "--set", v)
	}
	e.helm(t, args...)
	eventually(t, 2*time.Minute, "2 ready replicas", func(ctx context.Context) (bool, error) {
		pods := e.portalPods(t)
		ready := 0
		for _, p := range pods {
			if podReady(p) {
				ready++
			}
		}
		return len(pods) == 2 && ready == 2, nil
	})
}

func (e *env) portalPods(t testing.TB) []corev1.Pod {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(releaseNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/component!=uninstall"})
	if err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			live = append(live, p)
		}
	}
	return live
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rule creates a PortalClusterRule on Pods that fails for pods labelled
// label=true, and deletes it when the test ends.
func (e *env) rule(t testing.TB, name, action, label string) {
	t.Helper()
	r := &policyv1alpha1.PortalClusterRule{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: policyv1alpha1.RuleSpec{
			Severity:          "high",
			EnforcementAction: policyv1alpha1.EnforcementAction(action),
			Match:             policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Group: "", Kind: "Pod"}}},
			Rule:              fmt.Sprintf(`metadata.labels[%q] == "true"`, label),
			Message:           name + " violated",
		},
	}
	if err := e.c.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.c.Delete(context.Background(), r) })
}

func testPod(name string, labels map[string]string, privileged bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "hello", Image: devcluster.HelloImage, ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(privileged)},
		}}},
	}
}

// createDry creates pod in ns as a server-side dry run: the webhook sees
// it as any create, nothing is stored.
func (e *env) createDry(ns string, pod *corev1.Pod) error {
	_, err := e.cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// consistently requires ok to hold for n requests in a row: the two
// replicas behind the Service load a new rule independently.
func consistently(t testing.TB, what string, n int, ok func() (bool, string)) {
	t.Helper()
	streak := 0
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var good bool
		good, last = ok()
		if !good {
			streak = 0
			return false, nil
		}
		streak++
		return streak >= n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s (%d in a row): %v; last: %s", what, n, err, last)
	}
}

func testDeny(t *testing.T, e *env) {
	e.rule(t, "e2e-no-privileged", "deny", "e2e-deny")
	consistently(t, "the privileged pod denied by both replicas", 10, func() (bool, string) {
		err := e.createDry(e.workload, testPod("root", map[string]string{"e2e-deny": "true"}, true))
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "e2e-no-privileged violated"), fmt.Sprint(err)
	})
	if err := e.createDry(e.workload, testPod("fine", nil, false)); err != nil {
		t.Fatalf("a compliant pod was refused: %v", err)
	}
}

func testWarn(t *testing.T, e *env) {
	e.rule(t, "e2e-warn", "warn", "e2e-warn")
	consistently(t, "a warning from both replicas", 10, func() (bool, string) {
		e.takeWarnings()
		err := e.createDry(e.workload, testPod("warned", map[string]string{"e2e-warn": "true"}, false))
		w := e.takeWarnings()
		return err == nil && slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "e2e-warn violated") }), fmt.Sprintf("err %v, warnings %q", err, w)
	})
}

func testDryrun(t *testing.T, e *env) {
	e.rule(t, "e2e-dryrun", "dryrun", "e2e-dryrun")
	before := e.dryrunCount(t)
	// Keep creating until a replica counts it: the rule reaches the
	// replicas independently. Every create must be admitted.
	eventually(t, time.Minute, "portal_admission_dryrun_violations_total{rule=\"e2e-dryrun\"} to move", func(context.Context) (bool, error) {
		e.takeWarnings()
		if err := e.createDry(e.workload, testPod("dry", map[string]string{"e2e-dryrun": "true"}, false)); err != nil {
			return false, fmt.Errorf("a dryrun rule refused a pod: %w", err)
		}
		if w := e.takeWarnings(); slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "e2e-dryrun") }) {
			return false, fmt.Errorf("a dryrun rule warned: %q", w)
		}
		return e.dryrunCount(t) > before, nil
	})
}

// dryrunCount sums the dryrun counter of e2e-dryrun over Portal's pods,
// read from each pod's metrics port.
func (e *env) dryrunCount(t testing.TB) float64 {
	t.Helper()
	var sum float64
	for _, p := range e.portalPods(t) {
		if p.Status.PodIP == "" {
			continue
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + net.JoinHostPort(p.Status.PodIP, "8443") + "/metrics")
		if err != nil {
			t.Fatalf("metrics of %s: %v", p.Name, err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, `portal_admission_dryrun_violations_total{rule="e2e-dryrun"} `); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err != nil {
					t.Fatalf("metrics of %s: %q: %v", p.Name, line, err)
				}
				sum += v
			}
		}
		resp.Body.Close()
	}
	return sum
}

// leader returns the Lease's holder, which names a pod of Portal.
func (e *env) leader(t testing.TB) (holder string, leases int) {
	t.Helper()
	ls, err := e.cs.CoordinationV1().Leases(releaseNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			leases++
			holder = *l.Spec.HolderIdentity
		}
	}
	return holder, leases
}

// holderPod is the pod a holder identity (<pod name>_<uuid>) names.
func holderPod(holder string) string {
	name, _, _ := strings.Cut(holder, "_")
	return name
}

func testOneLeader(t *testing.T, e *env) {
	holder, n := e.leader(t)
	if n != 1 {
		t.Fatalf("%d held Leases in %s, want exactly 1", n, releaseNS)
	}
	pods := e.portalPods(t)
	if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == holderPod(holder) }) {
		t.Fatalf("the Lease holder %q is not one of Portal's pods", holder)
	}
}

func testLeaderMoves(t *testing.T, e *env) {
	holder, _ := e.leader(t)
	old := holderPod(holder)
	if err := e.cs.CoreV1().Pods(releaseNS).Delete(context.Background(), old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Seed 003: leadership moves within 15 s of the leader's deletion.
	eventually(t, 15*time.Second, "another pod to hold the Lease", func(context.Context) (bool, error) {
		h, n := e.leader(t)
		return n == 1 && holderPod(h) != old, nil
	})
	e.waitReplicas(t, 2)
}

func (e *env) waitReplicas(t testing.TB, n int32) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("%d available replicas", n), func(ctx context.Context) (bool, error) {
		d, err := e.cs.AppsV1().Deployments(releaseNS).Get(ctx, releaseName, metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == n && d.Status.Replicas == n && len(e.portalPods(t)) == int(n), nil
	})
}

func (e *env) scale(t testing.TB, n int32) {
	t.Helper()
	s, err := e.cs.AppsV1().Deployments(releaseNS).GetScale(context.Background(), releaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = n
	if _, err := e.cs.AppsV1().Deployments(releaseNS).UpdateScale(context.Background(), releaseName, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func testFailClosed(t *testing.T, e *env) {
	e.rule(t, "e2e-no-privileged-2", "deny", "e2e-deny")
	// The webhook configuration covers Pods once a rule on Pods is loaded:
	// see it enforced before taking every replica away.
	consistently(t, "the rule enforced by both replicas", 10, func() (bool, string) {
		err := e.createDry(e.workload, testPod("root", map[string]string{"e2e-deny": "true"}, true))
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "e2e-no-privileged-2 violated"), fmt.Sprint(err)
	})
	e.scale(t, 0)
	e.waitReplicas(t, 0)
	eventually(t, 2*time.Minute, "every Portal pod gone, terminating ones too", func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/component!=uninstall"})
		return err == nil && len(pods.Items) == 0, nil
	})
	err := e.createDry(e.workload, testPod("unchecked", nil, false))
	if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("a create in %s with no Portal replica: %v, want it rejected by the failure policy (failed calling webhook)", e.workload, err)
	}
	for _, ns := range []string{metav1.NamespaceSystem, releaseNS} {
		if err := e.createDry(ns, testPod("exempt", nil, false)); err != nil {
			t.Errorf("a create in %s with no Portal replica: %v, want it admitted (excluded from the webhook)", ns, err)
		}
	}
	e.scale(t, 2)
	e.waitReplicas(t, 2)
}

// testUpgrade runs helm upgrade with a changed pod template, which rolls
// both replicas, while a client keeps creating a violating pod: every
// create must be denied by the rule (none admitted, none lost to a
// replica going away), and enforcement goes on after the upgrade.
func testUpgrade(t *testing.T, e *env) {
	e.rule(t, "e2e-no-privileged-3", "deny", "e2e-deny")
	violating := testPod("root", map[string]string{"e2e-deny": "true"}, true)
	consistently(t, "the rule enforced by both replicas", 10, func() (bool, string) {
		err := e.createDry(e.workload, violating)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "e2e-no-privileged-3 violated"), fmt.Sprint(err)
	})
	before := map[string]bool{}
	for _, p := range e.portalPods(t) {
		before[p.Name] = true
	}
	var (
		mu       sync.Mutex
		sent     int
		lost     []string
		admitted int
		stop     = make(chan struct{})
		stopped  = make(chan struct{})
	)
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := e.createDry(e.workload, violating)
			mu.Lock()
			sent++
			switch {
			case err == nil:
				admitted++
			case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "e2e-no-privileged-3 violated"):
				lost = append(lost, err.Error())
			}
			mu.Unlock()
		}
	}()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"upgrade", releaseName, filepath.Join(root, "deploy", "helm", "portal"), "--namespace", releaseNS,
		"--reuse-values", "--set", "logLevel=debug", "--wait", "--timeout", "4m"}
	e.helm(t, args...)
	eventually(t, 3*time.Minute, "both replicas replaced", func(context.Context) (bool, error) {
		pods := e.portalPods(t)
		for _, p := range pods {
			if before[p.Name] || !podReady(p) {
				return false, nil
			}
		}
		return len(pods) == 2, nil
	})
	close(stop)
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d creates during the upgrade", sent)
	if sent < 10 {
		t.Errorf("only %d creates during the upgrade: the loop did not run", sent)
	}
	if admitted > 0 {
		t.Errorf("%d of %d creates of a violating pod were admitted during the rolling upgrade", admitted, sent)
	}
	// The API server pools its connections to the webhook by the
	// Service's name: without --shutdown-drain a stopping replica closes
	// connections it is still using, and creates fail ("EOF", "broken pipe").
	if len(lost) > 0 {
		t.Errorf("%d of %d creates during the rolling upgrade were rejected without Portal's decision; first: %s", len(lost), sent, lost[0])
	}
	consistently(t, "the rule enforced after the upgrade", 10, func() (bool, string) {
		err := e.createDry(e.workload, violating)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "e2e-no-privileged-3 violated"), fmt.Sprint(err)
	})
}
