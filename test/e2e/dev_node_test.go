package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

// helloURL is the curl line portal dev --node prints for the hello
// Service; proxyURL the one for the waf-proxy Engine's Service.
var (
	helloURL = regexp.MustCompile(`curl (http://[0-9.]+/)`)
	proxyURL = regexp.MustCompile(`-H 'Host: ([a-z.]+)' 'http://([0-9.]+)/\?q=<script>`)
)

// TestPortalDevNode: `portal dev --node --runtime` comes up with real pods,
// a pod answers through the printed ClusterIP from the host, the waf-proxy
// Engine it deploys from Portal's own image blocks an attack and passes a
// plain request, a real `kubectl exec` into a pod is seen in the API
// server's audit events and the runtime rule labels that pod, a
// ServiceAccount's exec gets its token revoked, Falco alerts posted with
// the credentials it prints quarantine the running pods they name, and
// Ctrl-C leaves nothing of the node on the host.
func TestPortalDevNode(t *testing.T) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "portal")
	build := exec.Command("go", "build", "-o", bin, "./cmd/portal")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	am := amtest.Start(t)
	dev := exec.Command(bin, "dev", "--node", "--runtime", "--kubeconfig-out", kubeconfig,
		// The demo's objects, and the runtime cookbook's revoke-sa-token-on-exec
		// and falco-quarantine.
		"--install-manifests", "examples/waf,examples/manifests/legacy-deployment.yaml,examples/rules/runtime/revoke-sa-token-on-exec.yaml,examples/rules/runtime/falco-quarantine.yaml",
		"--alertmanager-url", am.URL(),
		"--runtime-listen", "127.0.0.1:"+itoa(freePort(t)),
		"--webhook-port", itoa(freePort(t)),
		"--metrics-bind-address", "127.0.0.1:"+itoa(freePort(t)),
		"--health-probe-bind-address", "127.0.0.1:"+itoa(freePort(t)),
		// The node's pods reach the cache at the node's address.
		"--waf-cache-addr", devcluster.NodeIP+":"+itoa(freePort(t)))
	// The node's images are built from the checkout.
	dev.Dir = root
	dev.Stderr = os.Stderr
	stdout, err := dev.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	url, proxy, falco := make(chan string, 1), make(chan []string, 1), make(chan falcoHint, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var falcoTarget string
		for sc.Scan() {
			t.Log(sc.Text())
			if m := falcoPod.FindStringSubmatch(sc.Text()); m != nil {
				falcoTarget = m[1]
			}
			if falcoCurl.MatchString(sc.Text()) {
				falco <- parseFalcoHint(root, falcoTarget, sc.Text())
			}
			if m := helloURL.FindStringSubmatch(sc.Text()); m != nil && !strings.Contains(sc.Text(), "Host:") {
				url <- m[1]
			}
			if m := proxyURL.FindStringSubmatch(sc.Text()); m != nil {
				proxy <- m[1:]
			}
		}
		exited <- dev.Wait()
	}()
	t.Cleanup(func() { _ = dev.Process.Kill() })

	// Three minutes to come up, plus however long another test binary's node
	// holds the host lock (portal dev waits for it), within the test's deadline.
	limit := 3 * time.Minute
	if d, ok := t.Deadline(); ok {
		limit = max(limit, time.Until(d)-2*time.Minute)
	}
	var u string
	select {
	case u = <-url:
	case err := <-exited:
		t.Fatalf("portal dev --node exited before printing the Service's address: %v", err)
	case <-time.After(limit):
		t.Fatalf("portal dev --node printed no Service address within %s", limit.Round(time.Second))
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(u)
	if err != nil {
		t.Fatalf("GET %s from the host: %v", u, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(body), "hello from hello-") {
		t.Fatalf("GET %s: %q, want an answer of a demo/hello pod", u, body)
	}
	// Printed after the hello line, once the proxy blocks.
	var p []string
	select {
	case p = <-proxy:
	case <-time.After(time.Minute):
		t.Fatal("portal dev --node printed no waf-proxy Engine address")
	}
	if code, _ := get(t, "http://"+p[1]+"/?q=%3Cscript%3Ealert(1)%3C/script%3E", p[0]); code != http.StatusForbidden {
		t.Errorf("an XSS probe through the waf-proxy Engine: %d, want 403", code)
	}
	if code, body := get(t, "http://"+p[1]+"/", p[0]); code != http.StatusOK || !strings.HasPrefix(body, "hello from edge-") {
		t.Errorf("a plain request through the waf-proxy Engine: %d %q, want 200 from a default/edge pod", code, body)
	}
	kubectl := filepath.Join(root, "bin", "k8s", "kubectl")
	execIsAudited(t, kubectl, kubeconfig)
	serviceAccountExecIsRevoked(t, kubectl, kubeconfig, am)
	// Printed with the other hints, after the hello address.
	var fh falcoHint
	select {
	case fh = <-falco:
	case <-time.After(time.Minute):
		t.Fatal("portal dev --runtime printed no curl line posting a Falco alert")
	}
	falcoAlertQuarantines(t, root, kubectl, kubeconfig, am, fh)

	if err := dev.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("portal dev --node did not exit cleanly on Ctrl-C: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("portal dev --node still running a minute after Ctrl-C")
	}
	if _, err := os.Stat(devcluster.NodeRunDir()); !os.IsNotExist(err) {
		t.Errorf("the node's directory %s is still there", devcluster.NodeRunDir())
	}
	for _, link := range []string{"portal0", "portal-svc0"} {
		if _, err := net.InterfaceByName(link); err == nil {
			t.Errorf("interface %s left", link)
		}
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods"); len(cg) > 0 {
		t.Errorf("cgroups left: %v", cg)
	}
	out, err := exec.Command("iptables-save").Output()
	if err != nil || strings.Contains(string(out), "KUBE-") {
		t.Errorf("iptables chains of the node left (err %v)", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// serviceAccountExecIsRevoked: a ServiceAccount's token used for a real
// exec into a pod on the node makes revoke-sa-token-on-exec recreate the
// account (its bound tokens die with the old UID) once, with an Event on it,
// label the pod and raise an alert in the real Alertmanager.
func serviceAccountExecIsRevoked(t *testing.T, kubectl, kubeconfig string, am *amtest.Server) {
	t.Helper()
	run := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", "demo"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run(`apiVersion: v1
kind: ServiceAccount
metadata: {name: ci-runner, namespace: demo}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: exec, namespace: demo}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list]}
- {apiGroups: [""], resources: [pods/exec], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: ci-runner-exec, namespace: demo}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: exec}
subjects: [{kind: ServiceAccount, name: ci-runner, namespace: demo}]
`, "apply", "-f", "-")
	uid := run("", "get", "serviceaccount", "ci-runner", "-o", "jsonpath={.metadata.uid}")
	token := run("", "create", "token", "ci-runner")
	pod := run("", "get", "pods", "-l", "app.kubernetes.io/name=hello", "-o", "jsonpath={.items[1].metadata.name}")
	// The admin's kubeconfig, without its client certificate: the token
	// is who calls.
	server := run("", "config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	caData := run("", "config", "view", "--minify", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}")
	pem, err := base64.StdEncoding.DecodeString(caData)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	sa := exec.Command(kubectl, "--kubeconfig", os.DevNull, "--server", server, "--certificate-authority", ca, "--token", token,
		"-n", "demo", "exec", pod, "--", "/hello", "get", "http://hello.demo.svc.cluster.local/")
	if out, err := sa.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "hello from hello-") {
		t.Fatalf("kubectl exec %s as ServiceAccount demo/ci-runner: %v %q", pod, err, out)
	}
	poll(t, "ServiceAccount demo/ci-runner recreated", func() bool {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "-n", "demo", "get", "serviceaccount", "ci-runner", "-o", "jsonpath={.metadata.uid}").Output()
		return err == nil && len(out) > 0 && string(out) != uid
	})
	poll(t, "the pod labelled portal.io/exec-by-serviceaccount=true", func() bool {
		return run("", "get", "pod", pod, "-o", "jsonpath={.metadata.labels.portal\\.io/exec-by-serviceaccount}") == "true"
	})
	saEvents := func() string {
		return run("", "get", "events", "--field-selector", "involvedObject.kind=ServiceAccount,involvedObject.name=ci-runner",
			"-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
	}
	poll(t, "an Event on ServiceAccount demo/ci-runner saying it was recreated", func() bool {
		return strings.Contains(saEvents(), "rule revoke-sa-token-on-exec: ") && strings.Contains(saEvents(), "recreated it with UID")
	})
	poll(t, "the alert in Alertmanager", func() bool {
		as, err := am.Alerts("demo")
		if err != nil {
			return false
		}
		for _, a := range as {
			if a.Labels["rule"] == "revoke-sa-token-on-exec" {
				return true
			}
		}
		return false
	})
	// Once: the recreated account is not revoked again.
	if n := strings.Count(saEvents(), "recreated it with UID"); n != 1 {
		t.Errorf("%d Events say ServiceAccount demo/ci-runner was recreated, want 1", n)
	}
}

// poll waits up to a minute for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: not within a minute: %v", what, err)
	}
}

// execIsAudited runs a real exec into a demo/hello pod on the node (the
// hello binary fetching the hello Service from inside the pod) and waits for
// portal dev's runtime rule, fed by the API server's audit webhook, to label
// that pod.
func execIsAudited(t *testing.T, kubectl, kubeconfig string) {
	t.Helper()
	run := func(args ...string) (string, error) {
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", "demo"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("get", "pods", "-l", "app.kubernetes.io/name=hello", "-o", "jsonpath={.items[0].metadata.name}")
	if err != nil || out == "" {
		t.Fatalf("no demo/hello pod: %v %s", err, out)
	}
	pod := out
	out, err = run("exec", pod, "--", "/hello", "get", "http://hello.demo.svc.cluster.local/")
	if err != nil || !strings.HasPrefix(out, "hello from hello-") {
		t.Fatalf("kubectl exec %s: %v %q, want the hello Service's answer from inside the pod", pod, err, out)
	}
	poll(t, "pod demo/"+pod+" labelled portal.io/runtime-exec=true", func() bool {
		label, err := run("get", "pod", pod, "-o", "jsonpath={.metadata.labels.portal\\.io/runtime-exec}")
		return err == nil && label == "true"
	})
}

// get sends GET url with Host header host and returns the status and body.
func get(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body)
}
