//go:build !portal_nodev

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/pki"
)

// devRuntimeAddr is where portal dev --runtime serves the runtime endpoint.
const devRuntimeAddr = "127.0.0.1:18092"

// devAuditPolicy records what the runtime event classes cover, at Metadata
// level, as docs/concepts/runtime.md recommends.
const devAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: [pods/exec, pods/attach, pods/portforward, pods/proxy, services/proxy, nodes/proxy,
                pods/ephemeralcontainers, secrets, serviceaccounts/token]
  - group: rbac.authorization.k8s.io
    resources: [roles, clusterroles, rolebindings, clusterrolebindings]
- level: Metadata
  verbs: [delete, deletecollection]
  resources:
  - group: ""
    resources: [pods]
- level: None
`

// The files prepareRuntime writes under runtimeDir that the hints name.
const (
	devCAFile         = "ca.crt"
	devFalcoTokenFile = "falco-token"
	devFalcoAlertFile = "falco-alert.json"
)

// presetRuntime points the runtime endpoint at the address, the certificate
// directory and the token files prepareRuntime fills, before the flags are
// checked: the endpoint needs a certificate, and portal dev makes one.
func (o *devOptions) presetRuntime(changed func(string) bool) {
	r := &o.cfg.Runtime
	if !changed("runtime-listen") {
		r.Listen = devRuntimeAddr
	}
	r.CertDir, r.AuditTokenFile = o.runtimeDir(), filepath.Join(o.runtimeDir(), "token")
	if !changed("runtime-falco-token-file") {
		r.FalcoTokenFile = filepath.Join(o.runtimeDir(), devFalcoTokenFile)
	}
}

// runtimeDir is where portal dev writes the runtime endpoint's files.
func (o *devOptions) runtimeDir() string {
	return filepath.Join(filepath.Dir(o.kubeconfigOut), "runtime")
}

// prepareRuntime makes what the API server's audit webhook, Portal's
// runtime endpoint and a Falco stand-in need under dir (a serving
// certificate and its CA, a token for /audit and another for /falco, the
// audit policy and the webhook kubeconfig), and returns the API server
// flags that turn the webhook on. It points Portal's runtime endpoint at
// them and adds the demo runtime rule.
func (o *devOptions) prepareRuntime(changed func(string) bool, assets devAssets) (map[string]string, error) {
	dir := o.runtimeDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("portal dev: %w", err)
	}
	b, err := pki.NewSelfSigned(time.Now(), 24*time.Hour, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("portal dev: runtime certificate: %w", err)
	}
	key, err := x509.MarshalPKCS8PrivateKey(b.Serving.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("portal dev: runtime certificate: %w", err)
	}
	var chain []byte
	for _, der := range b.Serving.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	// Two tokens: whoever holds Falco's may post alerts, not forge the API
	// server's audit events.
	token, falcoToken := newDevToken(), newDevToken()
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: portal
  cluster: {server: "https://%s/audit", certificate-authority-data: %s}
users:
- name: kube-apiserver
  user: {token: %s}
contexts:
- name: portal
  context: {cluster: portal, user: kube-apiserver}
current-context: portal
`, o.cfg.Runtime.Listen, base64.StdEncoding.EncodeToString(b.CABundle()), token)
	for name, data := range map[string][]byte{
		"tls.crt": chain, "tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
		"token": []byte(token), "policy.yaml": []byte(devAuditPolicy), "webhook.kubeconfig": []byte(kubeconfig),
		devCAFile: b.CABundle(), devFalcoTokenFile: []byte(falcoToken),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, fmt.Errorf("portal dev: %w", err)
		}
	}
	r := &o.cfg.Runtime
	if !changed("runtime-audit-log-state") {
		r.AuditLogState = filepath.Join(dir, "audit-log.offset")
	}
	if !changed("install-rules") {
		o.rules = append(o.rules, assets.path(filepath.Join("examples", "rules", "runtime-demo")))
	}
	return map[string]string{
		"audit-policy-file":            filepath.Join(dir, "policy.yaml"),
		"audit-webhook-config-file":    filepath.Join(dir, "webhook.kubeconfig"),
		"audit-webhook-batch-max-wait": "200ms",
		// At stop, Portal is gone before the API server flushes its last
		// batch: retried from the default 10 s backoff, five times, that
		// flush held Ctrl-C for over a minute.
		"audit-webhook-initial-backoff": "100ms",
	}, nil
}

// newDevToken returns a random bearer token.
func newDevToken() string {
	secret := make([]byte, 24)
	_, _ = rand.Read(secret) // never fails (crypto/rand's documentation)
	return hex.EncodeToString(secret)
}

// createRuntimeDemoPod creates demo/runtime-demo for the demo rule to act
// on. Without --node it never runs: an exec into it is refused, and
// audited all the same. It meets the restricted Pod Security Standard, so
// the pod-security rules admit the label the runtime rule adds.
func createRuntimeDemoPod(ctx context.Context, c client.Client) error {
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "runtime-demo", Labels: map[string]string{"app.kubernetes.io/name": "runtime-demo"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app@sha256:" + strings.Repeat("0", 64), SecurityContext: sc}}}}
	if err := c.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("portal dev: runtime demo pod: %w", err)
	}
	return nil
}

// runtimeHint shows the runtime demo: without a node, an exec into
// demo/runtime-demo, refused and audited all the same; with one, a real
// exec into a pod of demo/hello.
func runtimeHint(kubectl string, node bool) string {
	if node {
		return fmt.Sprintf("\nThe runtime source (the API server's audit webhook): a real exec into a pod; the runtime rule labels it:\n"+
			"  %s -n demo exec deploy/hello -- /hello get http://hello.demo.svc.cluster.local/\n"+
			"  %s -n demo get pods -L portal.io/runtime-exec\n", kubectl, kubectl)
	}
	return fmt.Sprintf("  %s -n demo exec runtime-demo -- id   # audited (refused without --node); the runtime rule labels the pod\n  %s -n demo get pod runtime-demo -L portal.io/runtime-exec\n", kubectl, kubectl)
}

// falcoHint writes a Falco alert about a demo pod (a running demo/hello pod
// with --node, else demo/runtime-demo) in the JSON Falco's http_output and
// Falcosidekick post, and returns the lines that apply the cookbook's Falco
// rule and post the alert to /falco with the token portal dev made, as
// Falco would.
func (o *devOptions) falcoHint(ctx context.Context, c client.Client, kubectl string, assets devAssets) (string, error) {
	pod, err := falcoDemoPod(ctx, c, o.node)
	if err != nil {
		return "", err
	}
	// Falco writes "<NA>" for a field it cannot read, not "\u003cNA\u003e".
	var data bytes.Buffer
	enc := json.NewEncoder(&data)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(devFalcoAlert(pod, time.Now())); err != nil {
		return "", err
	}
	file := filepath.Join(o.runtimeDir(), devFalcoAlertFile)
	if err := os.WriteFile(file, data.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("portal dev: %w", err)
	}
	// The endpoint's certificate names 127.0.0.1, whatever it listens on.
	_, port, err := net.SplitHostPort(o.cfg.Runtime.Listen)
	if err != nil {
		return "", fmt.Errorf("portal dev: --runtime-listen: %w", err)
	}
	return fmt.Sprintf("\nFalco alerts (POST /falco, as Falco's http_output or Falcosidekick send them): with the cookbook's Falco rule, an alert naming pod demo/%s quarantines it:\n"+
		"  %s apply -f %s\n"+
		"  curl -fsS --cacert %s -H \"Authorization: Bearer $(cat %s)\" --data-binary @%s https://127.0.0.1:%s/falco\n"+
		"  %s -n demo get pod %s -L portal.io/falco-alert,portal.io/quarantine\n",
		pod.Name, kubectl, relative(assets.path(filepath.Join("examples", "rules", "runtime", "falco-quarantine.yaml"))),
		relative(filepath.Join(o.runtimeDir(), devCAFile)), relative(o.cfg.Runtime.FalcoTokenFile), relative(file), port,
		kubectl, pod.Name), nil
}

// falcoDemoPod returns the pod the Falco hint's alert names: the first
// running demo/hello pod by name with a node, demo/runtime-demo without.
func falcoDemoPod(ctx context.Context, c client.Client, node bool) (*corev1.Pod, error) {
	if !node {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "runtime-demo"}, &p); err != nil {
			return nil, fmt.Errorf("portal dev: runtime demo pod: %w", err)
		}
		return &p, nil
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace("demo"), client.MatchingLabels{"app.kubernetes.io/name": "hello"}); err != nil {
		return nil, fmt.Errorf("portal dev: hello pods: %w", err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range pods.Items {
		if pods.Items[i].Status.Phase == corev1.PodRunning {
			return &pods.Items[i], nil
		}
	}
	return nil, errors.New("portal dev: no running demo/hello pod")
}

// devFalcoAlert is the alert Falco's "Terminal shell in container" rule
// raises for a shell in pod's first container, with the output fields
// Falco documents (container.id as Falco shortens it, to 12 characters).
func devFalcoAlert(pod *corev1.Pod, now time.Time) event.FalcoAlert {
	now = now.UTC()
	ctr := pod.Spec.Containers[0].Name
	id := "<NA>"
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == ctr {
			if _, full, ok := strings.Cut(st.ContainerID, "://"); ok && len(full) >= 12 {
				id = full[:12]
			}
		}
	}
	return event.FalcoAlert{
		Output: fmt.Sprintf("%s: Notice A shell was spawned in a container with an attached terminal (evt_type=execve user=root user_uid=0 process=sh parent=runc command=sh terminal=34816 container_id=%s container_name=%s k8s_ns=%s k8s_pod_name=%s)",
			now.Format("15:04:05.000000000"), id, ctr, pod.Namespace, pod.Name),
		Priority: "Notice", Rule: "Terminal shell in container", Time: now, Source: "syscall", Hostname: devcluster.NodeName,
		Tags: []string{"T1059", "container", "maturity_stable", "mitre_execution", "shell"},
		OutputFields: map[string]any{
			"container.id": id, "container.name": ctr, "evt.time": now.UnixNano(), "evt.type": "execve",
			event.FieldNamespace: pod.Namespace, event.FieldPod: pod.Name,
			"proc.cmdline": "sh", "proc.name": "sh", "proc.pname": "runc", "proc.tty": 34816, "user.name": "root", "user.uid": 0,
		},
	}
}
