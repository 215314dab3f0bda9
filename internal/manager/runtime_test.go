package manager

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

// runtimeAuditPolicy is the audit policy docs/concepts/runtime.md
// recommends, trimmed to what the test makes.
const runtimeAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: [pods/exec, pods/attach, pods/portforward, secrets, serviceaccounts/token]
- level: None
`

var runtimeRules = map[string]string{
	"exec.yaml": `name: rt-exec-in-prod
severity: high
mode: [runtime]
runtime: {events: [exec]}
match: {gvk: [{group: "", version: v1, kind: Pod}], namespaces: {include: [rt-prod]}}
rule: event.user.serviceAccount != nil
message: '{{ event.user.username }} exec into {{ object.metadata.name }}'
alert: PortalExecByServiceAccount
actions:
- {type: label, key: portal.io/exec-by-serviceaccount, value: "true"}
- {type: revoke-sa-token}
`,
	"secret.yaml": `name: rt-secret-read-by-ci
severity: high
mode: [runtime]
runtime: {events: [secret-read]}
match: {gvk: [{group: "", version: v1, kind: Secret}], namespaces: {include: [rt-prod]}}
rule: event.user.username startsWith "system:serviceaccount:rt-ci:"
`,
	"falco.yaml": `name: rt-falco-quarantine
severity: critical
mode: [runtime]
runtime: {events: [falco]}
match: {gvk: [{group: "", version: v1, kind: Pod}]}
rule: event.falco.rule == "Terminal shell in container"
actions:
- {type: patch-networkpolicy}
`,
	"tenant.yaml": `apiVersion: portal.io/v1alpha1
kind: PortalRule
metadata: {name: rt-tenant-any, namespace: rt-other}
spec:
  mode: [runtime]
  runtime: {events: [any]}
  match: {gvk: [{group: "", kind: Secret}, {group: "", kind: Pod}]}
  rule: "true"
`,
}

// TestRuntimeFromTheAPIServersAuditWebhook starts a real kube-apiserver
// whose audit webhook backend posts to Portal's runtime endpoint. A
// ServiceAccount of rt-ci reading a Secret of rt-prod it may read raises
// the secret-read finding, which a PortalRule of another namespace never
// sees; the same account exec'ing into a pod of rt-prod (refused: there is
// no node, but the request is audited) labels the pod and revokes the
// account's token, once, with an Event on the pod.
func TestRuntimeFromTheAPIServersAuditWebhook(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own control plane")
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	token := "runtime-audit-token-" + fmt.Sprint(time.Now().UnixNano())
	falcoToken := "runtime-falco-token-" + fmt.Sprint(time.Now().UnixNano())
	caPEM := writeServingCert(t, dir)
	must(t, os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "falco-token"), []byte(falcoToken), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(runtimeAuditPolicy), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "webhook.kubeconfig"), []byte(auditWebhookKubeconfig(port, caPEM, token)), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := devcluster.Start(ctx, devcluster.Options{APIServerFlags: map[string]string{
		"audit-policy-file":            filepath.Join(dir, "policy.yaml"),
		"audit-webhook-config-file":    filepath.Join(dir, "webhook.kubeconfig"),
		"audit-webhook-batch-max-wait": "100ms",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	c := clusterClient(t, cl, "rt-portal", "rt-prod", "rt-ci", "rt-other")
	ci := setupRuntimeObjects(t, cl, c)

	cfg, reg, _ := layerConfig(t, "runtime")
	cfg.Namespace = "rt-portal"
	cfg.Runtime.Enabled = true
	cfg.Runtime.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.Runtime.CertDir = dir
	cfg.Runtime.AuditTokenFile = filepath.Join(dir, "token")
	cfg.Runtime.FalcoTokenFile = filepath.Join(dir, "falco-token")
	// Short, so the test sees the alert resolve when the window ends.
	cfg.Runtime.FindingWindow = 5 * time.Second
	am := amtest.Start(t)
	cfg.Audit.Sinks.AlertmanagerURL = am.URL()
	cfg.Audit.Sinks.AlertResendInterval = time.Second
	cfg.Actions.Enabled = true
	cfg.Actions.Types = []string{"label", "revoke-sa-token", "alertmanager", "patch-networkpolicy"}
	cfg.Audit.Sinks.Stdout = true
	cfg.Audit.Sinks.ReportFormat = "none"
	cfg.RulesFolder = t.TempDir()
	for name, body := range runtimeRules {
		must(t, os.WriteFile(filepath.Join(cfg.RulesFolder, name), []byte(body), 0o600))
	}
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	runUntilReady(t, cl, cfg)
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v\n%s", what, err, logs.String())
		}
	}

	// The ServiceAccount reads a Secret of rt-prod, as its Role allows.
	if _, err := ci.CoreV1().Secrets("rt-prod").Get(ctx, "db", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ServiceAccount may read the Secret: %v", err)
	}
	poll("the secret-read finding", func() bool { return len(findingLines(logs, "rt-secret-read-by-ci")) > 0 })
	if l := findingLines(logs, "rt-tenant-any"); len(l) > 0 {
		t.Fatalf("a PortalRule of rt-other saw an event of rt-prod: %v", l)
	}

	// The same account execs into the pod: refused (the pod has no node),
	// and audited all the same.
	err = ci.CoreV1().RESTClient().Post().Namespace("rt-prod").Resource("pods").Name("web-0").SubResource("exec").
		Param("command", "sh").Param("stdout", "true").Do(ctx).Error()
	if err == nil {
		t.Fatal("exec into a pod without a node succeeded")
	}
	pod := &corev1.Pod{}
	poll("the pod labelled", func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: "rt-prod", Name: "web-0"}, pod) == nil && pod.Labels["portal.io/exec-by-serviceaccount"] == "true"
	})
	poll("the account's token Secret deleted", func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: "rt-ci", Name: "builder-token"}, &corev1.Secret{}))
	})
	poll("an Event on the pod", func() bool {
		evs := &corev1.EventList{}
		if c.List(ctx, evs, client.InNamespace("rt-prod")) != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "web-0" && e.Reason == "ActionApplied" {
				return true
			}
		}
		return false
	})
	poll("the alert in Alertmanager", func() bool {
		as, err := am.Alerts("rt-prod")
		for _, a := range as {
			if a.Labels["alertname"] == "PortalExecByServiceAccount" && a.Labels["name"] == "web-0" && a.Labels["producer"] == "runtime" {
				return true
			}
		}
		return err == nil && false
	})
	// A second exec within the deduplication window acts no more.
	_ = ci.CoreV1().RESTClient().Post().Namespace("rt-prod").Resource("pods").Name("web-0").SubResource("exec").
		Param("command", "id").Param("stdout", "true").Do(ctx).Error()
	poll("the second exec deduplicated", func() bool { return counter(t, reg, "portal_runtime_findings_deduplicated_total") >= 1 })
	if n := len(actionLines(logs, "label", "web-0")); n != 1 {
		t.Errorf("label attempts on the pod = %d, want 1", n)
	}
	if n := len(actionLines(logs, "revoke-sa-token", "builder")); n != 1 {
		t.Errorf("revoke attempts on the account = %d, want 1", n)
	}
	// The finding's window ends: the alert resolves; the label stays.
	poll("the alert resolved", func() bool {
		as, err := am.Alerts("rt-prod")
		if err != nil {
			return false
		}
		for _, a := range as {
			if a.Labels["alertname"] == "PortalExecByServiceAccount" && a.Status.State == "active" && a.EndsAt.After(time.Now()) {
				return false
			}
		}
		return true
	})
	must(t, c.Get(ctx, client.ObjectKey{Namespace: "rt-prod", Name: "web-0"}, pod))
	if pod.Labels["portal.io/exec-by-serviceaccount"] != "true" {
		t.Errorf("the label went with the finding's window: %v", pod.Labels)
	}

	// Falco, as Falcosidekick posts it, about the pod: quarantined.
	alert, err := os.ReadFile("../runtime/testdata/falco/terminal-shell.json")
	must(t, err)
	alert = []byte(strings.ReplaceAll(string(alert), `"k8s.ns.name":"prod"`, `"k8s.ns.name":"rt-prod"`))
	postFalco(t, port, caPEM, falcoToken, alert)
	poll("the quarantine NetworkPolicy", func() bool {
		nps := &networkingv1.NetworkPolicyList{}
		if c.List(ctx, nps, client.InNamespace("rt-prod")) != nil {
			return false
		}
		for _, np := range nps.Items {
			if np.Annotations["portal.io/quarantine-of"] == "Pod/web-0" {
				return true
			}
		}
		return false
	})
}

// postFalco posts one alert to the runtime endpoint's /falco path, as
// Falcosidekick's webhook output does with its custom Authorization header.
func postFalco(t *testing.T, port int, caPEM []byte, token string, body []byte) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}, Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("https://127.0.0.1:%d/falco", port), strings.NewReader(string(body)))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /falco: %s", resp.Status)
	}
}

func findingLines(logs *syncBuffer, rule string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"rule":"`+rule+`"`) && strings.Contains(l, "finding") && !strings.Contains(l, `"audit":"action"`) {
			out = append(out, l)
		}
	}
	return out
}

func actionLines(logs *syncBuffer, action, name string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["audit"] == "action" && m["action"] == action && m["name"] == name {
			out = append(out, m)
		}
	}
	return out
}

// setupRuntimeObjects makes the ServiceAccount rt-ci/builder, allowed to
// read Secrets and exec into pods of rt-prod, with a legacy token Secret;
// the Secret rt-prod/db and the pod rt-prod/web-0. It returns a client
// authenticated as the account.
func setupRuntimeObjects(t *testing.T, cl *devcluster.Cluster, c client.Client) *kubernetes.Clientset {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "rt-ci", Name: "builder"}}
	for _, o := range []client.Object{
		sa,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "rt-ci", Name: "builder-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "builder"}},
			Type: corev1.SecretTypeServiceAccountToken},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "rt-prod", Name: "db"}, StringData: map[string]string{"password": "hunter2"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "rt-prod", Name: "web-0", Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "rt-prod", Name: "ci"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "rt-prod", Name: "ci"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "ci"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "rt-ci", Name: "builder"}}},
	} {
		must(t, c.Create(ctx, o))
	}
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cl.Config))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("rt-ci").CreateToken(ctx, "builder", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrInt64(3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for the ServiceAccount: %v", err)
	}
	cfg := rest.AnonymousClientConfig(cl.Config)
	cfg.BearerToken = tr.Status.Token
	ci, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ci
}

func ptrInt64(v int64) *int64 { return &v }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// auditWebhookKubeconfig is the kubeconfig the API server's audit webhook
// backend reads: Portal's endpoint, its CA, and the token it presents.
func auditWebhookKubeconfig(port int, caPEM []byte, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: portal
  cluster:
    server: https://127.0.0.1:%d/audit
    certificate-authority-data: %s
users:
- name: kube-apiserver
  user: {token: %s}
contexts:
- name: portal
  context: {cluster: portal, user: kube-apiserver}
current-context: portal
`, port, base64.StdEncoding.EncodeToString(caPEM), token)
}

// writeServingCert writes a self-signed tls.crt and tls.key for 127.0.0.1
// into dir and returns the certificate, which is its own CA.
func writeServingCert(t *testing.T, dir string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "portal-runtime"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	must(t, os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certPEM
}
