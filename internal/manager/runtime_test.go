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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/freeport"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
	"github.com/vilaca/portal/internal/testlog"
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
	e := startRuntimeEnv(t)
	e.leaderLabelled()
	e.secretRead()
	e.reportExpires()
	e.exec()
	e.alertResolves()
	e.falcoQuarantines()
}

// runtimeEnv is a control plane whose audit webhook posts to a running
// Portal with --runtime, and what the test reads of them.
type runtimeEnv struct {
	t          *testing.T
	ctx        context.Context
	c          client.Client
	ci         *kubernetes.Clientset // the ServiceAccount rt-ci/builder
	am         *amtest.Server
	reg        *prometheus.Registry
	logs       *testlog.Buffer
	port       int
	caPEM      []byte
	falcoToken string
}

func startRuntimeEnv(t *testing.T) *runtimeEnv {
	port, err := freeport.Pick("127.0.0.1")
	must(t, err)
	dir := t.TempDir()
	token := "runtime-audit-token-" + fmt.Sprint(time.Now().UnixNano())
	e := &runtimeEnv{t: t, port: port, falcoToken: "runtime-falco-token-" + fmt.Sprint(time.Now().UnixNano()), logs: &testlog.Buffer{}}
	e.caPEM = writeServingCert(t, dir)
	for name, data := range map[string]string{"token": token, "falco-token": e.falcoToken, "policy.yaml": runtimeAuditPolicy,
		"webhook.kubeconfig": auditWebhookKubeconfig(port, e.caPEM, token)} {
		must(t, os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	cl, err := devcluster.Start(ctx, devcluster.Options{APIServerFlags: map[string]string{
		"audit-policy-file":            filepath.Join(dir, "policy.yaml"),
		"audit-webhook-config-file":    filepath.Join(dir, "webhook.kubeconfig"),
		"audit-webhook-batch-max-wait": "100ms",
	}})
	must(t, err)
	t.Cleanup(func() { _ = cl.Stop() })
	e.c = clusterClient(t, cl, "rt-portal", "rt-prod", "rt-ci", "rt-other")
	e.ci = setupRuntimeObjects(t, cl, e.c)

	cfg, reg, _ := layerConfig(t, "runtime")
	e.reg = reg
	cfg.Namespace = "rt-portal"
	// This replica's pod, as the chart names it: labelled while it leads.
	must(t, e.c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "rt-portal", Name: "portal-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "portal", Image: "registry.example/portal:1"}}}}))
	cfg.LeaderPod = "portal-0"
	cfg.Runtime.Enabled, cfg.Runtime.Listen, cfg.Runtime.CertDir = true, fmt.Sprintf("127.0.0.1:%d", port), dir
	cfg.Runtime.AuditTokenFile, cfg.Runtime.FalcoTokenFile = filepath.Join(dir, "token"), filepath.Join(dir, "falco-token")
	// Short, so the test sees the alert resolve when the window ends.
	cfg.Runtime.FindingWindow = 5 * time.Second
	e.am = amtest.Start(t)
	if err := cfg.Sinks.Parse("--alertmanager-url="+e.am.URL(), "--alert-resend-interval=1s", "--audit-log-findings", "--report-format=wgpolicyk8s"); err != nil {
		t.Fatal(err)
	}
	cfg.Actions.Enabled = true
	cfg.Actions.Types = []string{"label", "revoke-sa-token", "alertmanager", "patch-networkpolicy"}
	cfg.RulesFolder = t.TempDir()
	for name, body := range runtimeRules {
		must(t, os.WriteFile(filepath.Join(cfg.RulesFolder, name), []byte(body), 0o600))
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(e.logs, nil))
	runUntilReady(t, cl, cfg)
	return e
}

func (e *runtimeEnv) poll(what string, cond func() bool) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		e.t.Fatalf("waiting for %s: %v\n%s", what, err, e.logs.String())
	}
}

// leaderLabelled: the leading replica's pod carries the label the runtime
// Service selects.
func (e *runtimeEnv) leaderLabelled() {
	e.poll("the leader's pod labelled", func() bool {
		pod := &corev1.Pod{}
		return e.c.Get(e.ctx, client.ObjectKey{Namespace: "rt-portal", Name: "portal-0"}, pod) == nil && pod.Labels[RuntimeLeaderLabel] == "true"
	})
}

// secretRead: the ServiceAccount reads a Secret of rt-prod, as its Role
// allows; the cluster rule raises a finding, rt-other's PortalRule nothing.
func (e *runtimeEnv) secretRead() {
	t := e.t
	if _, err := e.ci.CoreV1().Secrets("rt-prod").Get(e.ctx, "db", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ServiceAccount may read the Secret: %v", err)
	}
	e.poll("the secret-read finding", func() bool { return len(findingLines(e.logs, "rt-secret-read-by-ci")) > 0 })
	if l := findingLines(e.logs, "rt-tenant-any"); len(l) > 0 {
		t.Fatalf("a PortalRule of rt-other saw an event of rt-prod: %v", l)
	}
}

// reportExpires: the Secret read's finding is a result in rt-prod's
// PolicyReport for the finding's window, then no more.
func (e *runtimeEnv) reportExpires() {
	has := func() (bool, bool) {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(schema.GroupVersionKind{Group: "wgpolicyk8s.io", Version: "v1alpha2", Kind: "PolicyReportList"})
		if err := e.c.List(e.ctx, l, client.InNamespace("rt-prod")); err != nil {
			return false, false
		}
		for _, r := range l.Items {
			results, _, _ := unstructured.NestedSlice(r.Object, "results")
			for _, x := range results {
				if m, ok := x.(map[string]any); ok && m["policy"] == "rt-secret-read-by-ci" {
					return true, true
				}
			}
		}
		return false, true
	}
	e.poll("the runtime result in rt-prod's PolicyReport", func() bool { found, _ := has(); return found })
	e.poll("the runtime result gone after the finding's window", func() bool { found, ok := has(); return ok && !found })
}

// execInto posts an exec into rt-prod/web-0 as the ServiceAccount: refused
// (the pod has no node), and audited all the same.
func (e *runtimeEnv) execInto(command string) error {
	return e.ci.CoreV1().RESTClient().Post().Namespace("rt-prod").Resource("pods").Name("web-0").SubResource("exec").
		Param("command", command).Param("stdout", "true").Do(e.ctx).Error()
}

// exec: the account's exec labels the pod, revokes the account's token,
// records an Event and raises an alert, once: a second exec within the
// deduplication window acts no more.
func (e *runtimeEnv) exec() {
	t, ctx, c := e.t, e.ctx, e.c
	if err := e.execInto("sh"); err == nil {
		t.Fatal("exec into a pod without a node succeeded")
	}
	e.poll("the pod labelled", func() bool {
		pod := &corev1.Pod{}
		return c.Get(ctx, client.ObjectKey{Namespace: "rt-prod", Name: "web-0"}, pod) == nil && pod.Labels["portal.io/exec-by-serviceaccount"] == "true"
	})
	e.poll("the account's token Secret deleted", func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: "rt-ci", Name: "builder-token"}, &corev1.Secret{}))
	})
	e.poll("an Event on the pod", func() bool {
		evs := &corev1.EventList{}
		if c.List(ctx, evs, client.InNamespace("rt-prod")) != nil {
			return false
		}
		return slices.ContainsFunc(evs.Items, func(ev corev1.Event) bool {
			return ev.InvolvedObject.Name == "web-0" && ev.Reason == "ActionApplied"
		})
	})
	e.poll("the alert in Alertmanager", func() bool { return e.execAlert(false) })
	_ = e.execInto("id")
	e.poll("the second exec deduplicated", func() bool { return counter(t, e.reg, "portal_runtime_findings_deduplicated_total") >= 1 })
	if n := len(actionLines(e.logs, "label", "web-0")); n != 1 {
		t.Errorf("label attempts on the pod = %d, want 1", n)
	}
	if n := len(actionLines(e.logs, "revoke-sa-token", "builder")); n != 1 {
		t.Errorf("revoke attempts on the account = %d, want 1", n)
	}
}

// execAlert reports whether Alertmanager holds the exec's alert (still
// firing, when firing is set).
func (e *runtimeEnv) execAlert(firing bool) bool {
	as, err := e.am.Alerts("rt-prod")
	if err != nil {
		return false
	}
	return slices.ContainsFunc(as, func(a amtest.Alert) bool {
		return a.Labels["alertname"] == "PortalExecByServiceAccount" && a.Labels["name"] == "web-0" && a.Labels["producer"] == "runtime" &&
			(!firing || a.Status.State == "active" && a.EndsAt.After(time.Now()))
	})
}

// alertResolves: the finding's window ends, its alert resolves, and what
// the actions did stays.
func (e *runtimeEnv) alertResolves() {
	e.poll("the alert resolved", func() bool {
		_, err := e.am.Alerts("rt-prod")
		return err == nil && !e.execAlert(true)
	})
	pod := &corev1.Pod{}
	must(e.t, e.c.Get(e.ctx, client.ObjectKey{Namespace: "rt-prod", Name: "web-0"}, pod))
	if pod.Labels["portal.io/exec-by-serviceaccount"] != "true" {
		e.t.Errorf("the label went with the finding's window: %v", pod.Labels)
	}
}

// falcoQuarantines: Falco's alert, as Falcosidekick posts it, about the
// pod quarantines it.
func (e *runtimeEnv) falcoQuarantines() {
	alert, err := os.ReadFile("../runtime/testdata/falco/terminal-shell.json")
	must(e.t, err)
	alert = []byte(strings.ReplaceAll(string(alert), `"k8s.ns.name":"prod"`, `"k8s.ns.name":"rt-prod"`))
	postFalco(e.t, e.port, e.caPEM, e.falcoToken, alert)
	e.poll("the quarantine NetworkPolicy", func() bool {
		nps := &networkingv1.NetworkPolicyList{}
		if e.c.List(e.ctx, nps, client.InNamespace("rt-prod")) != nil {
			return false
		}
		return slices.ContainsFunc(nps.Items, func(np networkingv1.NetworkPolicy) bool {
			return np.Annotations["portal.io/quarantine-of"] == "Pod/web-0"
		})
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

func findingLines(logs *testlog.Buffer, rule string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"rule":"`+rule+`"`) && strings.Contains(l, "finding") && !strings.Contains(l, `"audit":"action"`) {
			out = append(out, l)
		}
	}
	return out
}

func actionLines(logs *testlog.Buffer, action, name string) []map[string]any {
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
