// Package e2e runs the portal binary as a user would, against the real local
// control plane that `make tools` builds.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/freeport"
)

const privilegedPod = `apiVersion: v1
kind: Pod
metadata: {name: root-shell, namespace: default}
spec:
  containers:
  - name: shell
    image: busybox:1.36
    securityContext: {privileged: true}
`

func freePort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// TestPortalDev is the newcomer's path: portal dev comes up, a violating pod
// applied with kubectl is denied with the rule's message, `kubectl get polr
// -A` shows audit's findings on the legacy Deployment created before Portal
// started, and Ctrl-C leaves no control plane behind. It runs the binary as
// `make tools` lays it out (bin/portal beside bin/k8s) from a directory
// outside any checkout, with no KUBEBUILDER_ASSETS: portal dev finds its
// binaries beside itself and installs the CRDs and demo built into it.
func TestPortalDev(t *testing.T) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildPortalBesideK8s(t, root)
	workDir := t.TempDir()
	kubeconfig := filepath.Join(workDir, ".portal-dev", "kubeconfig")
	dev := startPortalDev(t, bin, workDir, kubeconfig)

	select {
	case <-dev.ready:
	case err := <-dev.exited:
		t.Fatalf("portal dev exited before ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("portal dev not ready within 2 minutes")
	}

	kubectl := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "--kubeconfig", kubeconfig, "apply", "-f", "-")
	kubectl.Stdin = strings.NewReader(privilegedPod)
	out, err := kubectl.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "[pss-baseline-privileged]") || !strings.Contains(string(out), "privileged=true") {
		t.Fatalf("privileged pod not denied with the rule's message: %v\n%s", err, out)
	}
	checkApplyHint(t, dev.hints, workDir)
	// The playground namespace admits what the bundle denies, for the
	// cookbook pages that show audit and actions on such a pod.
	kubectl = exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "--kubeconfig", kubeconfig, "apply", "-f", "-")
	kubectl.Stdin = strings.NewReader(strings.Replace(privilegedPod, "namespace: default", "namespace: playground", 1))
	if out, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("privileged pod in namespace playground: %v\n%s", err, out)
	}
	waitForLegacyFinding(t, root, kubeconfig)

	select {
	case line := <-dev.proxyLine:
		runPrintedWAFProxy(t, workDir, bin, line)
	case <-time.After(10 * time.Second):
		t.Fatal("portal dev printed no waf-proxy command line")
	}

	stopPortalDev(t, dev, kubeconfig)
}

// TestPortalDevWithAuditOnlyRules: portal dev with rules none of which runs
// at admission (the cross-resource cookbook's audit rules) used to wait for
// webhook rules that never come and print "not ready"; it is ready.
func TestPortalDevWithAuditOnlyRules(t *testing.T) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildPortalBesideK8s(t, root)
	workDir := t.TempDir()
	rules := filepath.Join(workDir, "rules")
	if err := os.Mkdir(rules, 0o700); err != nil {
		t.Fatal(err)
	}
	const auditOnly = `name: no-privileged-audit
mode: [audit]
match: {gvk: [{group: "", version: v1, kind: Pod}]}
rule: container.securityContext.privileged == true
`
	if err := os.WriteFile(filepath.Join(rules, "rule.yaml"), []byte(auditOnly), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(workDir, ".portal-dev", "kubeconfig")
	dev := startPortalDev(t, bin, workDir, kubeconfig, "--install-rules", rules, "--install-manifests=")
	select {
	case <-dev.ready:
	case err := <-dev.exited:
		t.Fatalf("portal dev exited before ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("portal dev with audit-only rules not ready within 2 minutes")
	}
	stopPortalDev(t, dev, kubeconfig)
}

// buildPortalBesideK8s builds portal into a directory whose k8s/ holds the
// checkout's control-plane binaries, as make tools lays them out, and
// returns its path.
func buildPortalBesideK8s(t *testing.T, root string) string {
	t.Helper()
	binDir := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "bin", "k8s"), filepath.Join(binDir, "k8s")); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, "portal")
	build := exec.Command("go", "build", "-o", bin, "./cmd/portal")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// portalDev is a running `portal dev` and what its output said.
type portalDev struct {
	cmd       *exec.Cmd
	exited    chan error
	ready     chan struct{}
	hints     chan string
	proxyLine chan string
}

// startPortalDev starts `portal dev` in workDir on free ports, without
// KUBEBUILDER_ASSETS (it must find the binaries beside itself), and follows
// its output.
func startPortalDev(t *testing.T, bin, workDir, kubeconfig string, args ...string) *portalDev {
	t.Helper()
	dev := exec.Command(bin, append([]string{"dev", "--kubeconfig-out", kubeconfig,
		"--webhook-port", fmt.Sprint(freePort(t)),
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"--waf-cache-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t))}, args...)...)
	dev.Dir = workDir
	dev.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "KUBEBUILDER_ASSETS=") })
	dev.Stderr = os.Stderr
	stdout, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	p := &portalDev{cmd: dev, exited: make(chan error, 1), ready: make(chan struct{}), hints: make(chan string, 100), proxyLine: make(chan string, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			t.Log(sc.Text())
			select {
			case p.hints <- sc.Text():
			default:
			}
			if strings.HasPrefix(sc.Text(), "portal dev: ready") {
				close(p.ready)
			}
			if strings.Contains(sc.Text(), " waf-proxy --cache-url ") {
				p.proxyLine <- sc.Text()
			}
		}
		p.exited <- dev.Wait()
	}()
	t.Cleanup(func() { _ = dev.Process.Kill() })
	return p
}

// checkApplyHint checks that the manifest of the printed "apply -f" hint
// exists where the hint says, from portal dev's working directory.
func checkApplyHint(t *testing.T, hints chan string, workDir string) {
	t.Helper()
	var applyHint string
	for len(hints) > 0 && applyHint == "" {
		if _, after, ok := strings.Cut(<-hints, " apply -f "); ok {
			applyHint, _, _ = strings.Cut(strings.TrimSpace(after), " ")
		}
	}
	if applyHint == "" {
		t.Fatal(`portal dev printed no "apply -f" hint`)
	}
	if !filepath.IsAbs(applyHint) {
		applyHint = filepath.Join(workDir, applyHint)
	}
	if _, err := os.Stat(applyHint); err != nil {
		t.Fatalf("the hint names a manifest that is not there: %v", err)
	}
}

// waitForLegacyFinding waits until audit has reported the legacy Deployment
// of namespace demo, as kubectl get polr -A shows it.
func waitForLegacyFinding(t *testing.T, root, kubeconfig string) {
	t.Helper()
	var reports string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		get := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "--kubeconfig", kubeconfig, "get", "polr", "-A", "-o",
			`jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} fail={.summary.fail} {range .results[*]}{.resources[0].kind}/{.resources[0].name} {end}{"\n"}{end}`)
		out, err := get.CombinedOutput()
		reports = string(out)
		return err == nil && strings.Contains(reports, "demo/portal fail=") && strings.Contains(reports, "Deployment/legacy-billing") &&
			!strings.Contains(reports, "demo/portal fail=0 "), nil
	})
	if err != nil {
		t.Fatalf("kubectl get polr -A shows no audit finding on the legacy Deployment: %v\n%s", err, reports)
	}
	t.Logf("kubectl get polr -A: %s", reports)
}

// stopPortalDev sends Ctrl-C and checks that portal dev exits cleanly and
// leaves no kube-apiserver behind.
func stopPortalDev(t *testing.T, dev *portalDev, kubeconfig string) {
	t.Helper()
	apiserver := serverAddr(t, kubeconfig)
	if err := dev.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-dev.exited:
		if err != nil {
			t.Fatalf("portal dev did not exit cleanly on Ctrl-C: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("portal dev still running a minute after Ctrl-C")
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c, err := net.DialTimeout("tcp", apiserver, time.Second)
		if err != nil {
			return true, nil
		}
		c.Close()
		return false, nil
	})
	if err != nil {
		t.Fatalf("kube-apiserver at %s still accepts connections after portal dev exited", apiserver)
	}
}

// runPrintedWAFProxy runs the waf-proxy command line portal dev printed, in
// dir (portal dev's working directory), with its own ports and upstream, and checks that it loads the example
// rule set through the cache (TLS with the printed CA file, the printed
// token file) and blocks an attack.
func runPrintedWAFProxy(t *testing.T, dir, bin, line string) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("app")) }))
	defer up.Close()
	listen, metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	fields := strings.Fields(line)
	i := slices.Index(fields, "waf-proxy")
	if i < 0 {
		t.Fatalf("no waf-proxy in %q", line)
	}
	args := fields[i:]
	for j := 0; j+1 < len(args); j++ {
		switch args[j] {
		case "--upstream":
			args[j+1] = up.URL
		case "--listen":
			args[j+1] = listen
		case "--metrics-bind-address":
			args[j+1] = metrics
		}
	}
	proxy := exec.Command(bin, args...)
	proxy.Dir = dir
	proxy.Stderr = os.Stderr
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = proxy.Process.Signal(syscall.SIGTERM)
		_ = proxy.Wait()
	}()
	get := func(u string) int {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Accept", "text/html")
		req.Host = "app.example"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return get("http://"+metrics+"/readyz") == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("the printed waf-proxy did not load the rule set: %v", err)
	}
	if code := get("http://" + listen + "/?q=hello"); code != http.StatusOK {
		t.Fatalf("clean request through the printed waf-proxy: %d", code)
	}
	if code := get("http://" + listen + "/?q=<script>alert(1)</script>"); code != http.StatusForbidden {
		t.Fatalf("attack through the printed waf-proxy: %d, want 403", code)
	}
}

func serverAddr(t *testing.T, kubeconfig string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	t.Fatal("kubeconfig has no cluster")
	return ""
}
