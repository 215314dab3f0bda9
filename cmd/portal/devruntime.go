//go:build !portal_nodev

package main

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// presetRuntime points the runtime endpoint at the address and the
// certificate directory prepareRuntime fills, before the flags are checked:
// the endpoint needs a certificate, and portal dev makes one.
func (o *devOptions) presetRuntime(changed func(string) bool) {
	r := &o.cfg.Runtime
	if !changed("runtime-listen") {
		r.Listen = devRuntimeAddr
	}
	r.CertDir, r.AuditTokenFile = o.runtimeDir(), filepath.Join(o.runtimeDir(), "token")
}

// runtimeDir is where portal dev writes the runtime endpoint's files.
func (o *devOptions) runtimeDir() string {
	return filepath.Join(filepath.Dir(o.kubeconfigOut), "runtime")
}

// prepareRuntime makes what the API server's audit webhook and Portal's
// runtime endpoint need under dir (a serving certificate, a token, the
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
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	token := hex.EncodeToString(secret)
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
