package devcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestNodeRunsPodsAndLeavesNothing starts the real node, runs a 2-replica
// Deployment, reads a pod's answer through a ClusterIP Service from the
// host, then stops and checks the host is as before.
func TestNodeRunsPodsAndLeavesNothing(t *testing.T) {
	// No deadline of its own: under `go test ./...` another package's node
	// may hold the host lock for minutes; the test binary's -timeout bounds it.
	ctx := t.Context()
	c, err := Start(ctx, Options{Node: true, CRDDirectoryPaths: []string{}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ns := "node-test"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, ctx, "the default ServiceAccount of "+ns, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	labels := map[string]string{"app": "hello"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "hello", Image: HelloImage, ImagePullPolicy: corev1.PullNever,
					Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
				}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() && c.HasNode() {
			dumpNode(t, cs, ns, c.NodeLogDir())
		}
	})
	waitNode(t, ctx, "2 available replicas", func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "hello", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 2, nil
	})
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range pods.Items {
		want[fmt.Sprintf("hello from %s\n", p.Name)] = true
	}
	url := "http://" + net.JoinHostPort(svc.Spec.ClusterIP, "80") + "/"
	var body string
	waitNode(t, ctx, "an answer from a pod through "+url, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		client := &http.Client{Timeout: 2 * time.Second}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return true, nil
	})
	if !want[body] {
		t.Fatalf("body through the Service: %q, want one of %v", body, want)
	}

	// A pod finds the Service by name through the node's DNS; a name no
	// Service has does not resolve.
	if ok, out := runGet(t, ctx, cs, ns, "get-by-name", "http://hello."+ns+".svc/"); !ok || !want[out] {
		t.Fatalf("a pod's GET of http://hello.%s.svc/: succeeded %v, output %q, want one of %v", ns, ok, out, want)
	}
	if ok, out := runGet(t, ctx, cs, ns, "get-unknown", "http://nothing."+ns+".svc/"); ok || !strings.Contains(out, "no such host") {
		t.Fatalf("a pod's GET of a Service that does not exist: succeeded %v, output %q, want it to fail with no such host", ok, out)
	}

	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertHostClean(t)
}

// runGet runs `hello get url` as a pod in ns and returns whether it
// succeeded and what it printed.
func runGet(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name, url string) (bool, string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "get", Image: HelloImage, ImagePullPolicy: corev1.PullNever, Args: []string{"get", url},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	waitNode(t, ctx, "pod "+name+" to finish", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	out, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of pod %s: %v", name, err)
	}
	return phase == corev1.PodSucceeded, string(out)
}

func waitNode(t *testing.T, ctx context.Context, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v\nthe host's interfaces and routes then:\n%s", what, err, hostNetwork())
	}
}

// hostNetwork is `ip -br addr` and `ip route`: a node test that timed out
// has more than once found its bridge gone (the API server's address with
// it), and what else was on the host then is the lead.
func hostNetwork() string {
	var b strings.Builder
	for _, args := range [][]string{{"-br", "addr"}, {"route"}} {
		out, err := exec.Command("ip", args...).CombinedOutput()
		fmt.Fprintf(&b, "$ ip %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	return b.String()
}

// assertHostClean fails for anything a node leaves behind.
func assertHostClean(t *testing.T) {
	t.Helper()
	dir := NodeRunDir()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still exists (err %v)", dir, err)
	}
	mps, err := mountPoints(func(mp string) bool {
		return strings.HasPrefix(mp, dir) || strings.HasPrefix(mp, "/run/netns/cni-") || strings.Contains(mp, "kubelet") || strings.Contains(mp, "containerd")
	})
	if err != nil || len(mps) > 0 {
		t.Errorf("mounts left: %v (err %v)", mps, err)
	}
	for _, fam := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(fam).Output()
		if err != nil {
			t.Errorf("%s: %v", fam, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "KUBE-") || strings.Contains(l, "CNI-") {
				t.Errorf("%s: rule or chain left: %s", fam, l)
			}
		}
	}
	for _, link := range []string{bridgeName, serviceDevice} {
		if _, err := net.InterfaceByName(link); err == nil {
			t.Errorf("interface %s left", link)
		}
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, "veth") {
			t.Errorf("veth interface %s left", i.Name)
		}
	}
	if roots := kubepodsRoots(); len(roots) > 0 {
		t.Errorf("kubepods cgroups left: %v", roots)
	}
	for _, pattern := range []string{"/run/netns/cni-*", "/var/lib/cni/results/*", "/run/containerd/*", "/var/log/containers/*", "/var/log/pods/*"} {
		if left, _ := filepath.Glob(pattern); len(left) > 0 {
			t.Errorf("files left: %v", left)
		}
	}
	var procs []string
	_ = eachProcess(func(pid int, cmdline string) {
		if strings.Contains(cmdline, dir+"/") || strings.Contains(cmdline, "containerd") || strings.Contains(cmdline, "kubelet") || strings.Contains(cmdline, "kube-proxy") {
			procs = append(procs, fmt.Sprintf("%d %s", pid, cmdline))
		}
	})
	if len(procs) > 0 {
		t.Errorf("processes left: %v", procs)
	}
	if out, err := exec.Command("ip", "route", "show", ServiceCIDR).Output(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("route to %s left: %q (err %v)", ServiceCIDR, out, err)
	}
}

// dumpNode logs what a failed node test needs to be understood: the pods,
// the events of ns and the end of every component's log.
func dumpNode(t *testing.T, cs kubernetes.Interface, ns, logDir string) {
	ctx := context.Background()
	if pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			t.Logf("pod %s: phase %s, conditions %v, containers %v", p.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
	}
	if evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, e := range evs.Items {
			t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("--- %s\n%s", filepath.Base(l), b)
	}
}

// crashHelperEnv makes TestNodeCrashHelper start a node and die without
// stopping it.
const crashHelperEnv = "PORTAL_DEVCLUSTER_NODE_CRASH_HELPER"

// TestNodeCrashHelper is the process TestNodeCleanupAfterCrash kills: it
// starts a node, runs a pod and panics, so no deferred call, Cleanup or
// TestMain code runs.
func TestNodeCrashHelper(t *testing.T) {
	if os.Getenv(crashHelperEnv) == "" {
		return // only as TestNodeCleanupAfterCrash's subprocess
	}
	ctx := context.Background()
	c, err := Start(ctx, Options{Node: true, CRDDirectoryPaths: []string{}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(c.Config)
	waitNode(t, ctx, "the default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "hello", Image: HelloImage, ImagePullPolicy: corev1.PullNever}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, ctx, "the pod to run", func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	fmt.Println("node running; panicking")
	panic("crash with a running node")
}

// TestNodeCleanupAfterCrash: a test binary that panics with a running node
// (pods, mounts, chains, cgroups) leaves nothing behind once it is gone.
func TestNodeCleanupAfterCrash(t *testing.T) {
	// Bounded by the test binary's -timeout, not a fixed one: the helper may
	// wait for another package's node to release the host lock.
	ctx := t.Context()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestNodeCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashHelperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "node running; panicking") {
		t.Fatalf("the helper did not get to its panic with a running node (err %v):\n%s", err, out)
	}
	// The reaper holds the host lock until it has cleaned up.
	lock, err := lockHost(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	assertHostClean(t)
}

// TestNodeRefusesHostWithForeignKubelet: a kubelet the node did not start
// (a real Kubernetes node, say) makes Start fail, before the lock and the
// cleanup of leftovers, which would remove that kubelet's kubepods
// cgroups and pods.
func TestNodeRefusesHostWithForeignKubelet(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(t.TempDir(), "kubelet")
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, data, 0o755); err != nil {
		t.Fatal(err)
	}
	kubelet := exec.Command(fake, "300")
	if err := kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kubelet.Process.Kill(); _ = kubelet.Wait() })

	_, err = Start(context.Background(), Options{Node: true, CRDDirectoryPaths: []string{}})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("kubelet (pid %d) runs on this host", kubelet.Process.Pid)) {
		t.Fatalf("Start with a foreign kubelet running: %v, want a refusal naming it", err)
	}
}
