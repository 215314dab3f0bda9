package helm_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/freeport"
	"github.com/vilaca/portal/internal/manager"
)

var shared = &devtest.Shared{}

func TestMain(m *testing.M) { shared.Main(m) }

// notServed are the groups of kinds the chart renders for add-ons the test
// control plane does not have (cert-manager, the Prometheus Operator).
var notServed = map[string]bool{"cert-manager.io": true, "monitoring.coreos.com": true}

// objects splits a rendered manifest into objects.
func objects(t *testing.T, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func adminClient(t *testing.T) (client.Client, *devcluster.Cluster) {
	t.Helper()
	cl := shared.Cluster(t)
	c, err := client.New(cl.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS, Labels: map[string]string{
		// The chart's pods must pass the restricted profile.
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	if err := c.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return c, cl
}

// The API server accepts every object of every golden render (server-side
// dry run: schema, defaults, validation), and the pods of every Deployment
// and Job pass the restricted Pod Security Standard.
func TestGoldenManifestsAcceptedByAPIServer(t *testing.T) {
	c, _ := adminClient(t)
	for _, vf := range valueFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(vf), ".yaml"), func(t *testing.T) {
			manifest, err := os.ReadFile(goldenFile(vf))
			if err != nil {
				t.Fatal(err)
			}
			for _, u := range objects(t, manifest) {
				gvk := u.GroupVersionKind()
				what := gvk.Kind + " " + u.GetName()
				if notServed[gvk.Group] {
					if _, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); !meta.IsNoMatchError(err) {
						t.Errorf("%s: %s is served now (%v): validate it instead of passing over it", what, gvk.Group, err)
					}
					continue
				}
				if err := c.Create(t.Context(), u, client.DryRunAll); err != nil {
					t.Errorf("%s: dry-run create: %v", what, err)
				}
				if tmpl, ok, _ := unstructured.NestedMap(u.Object, "spec", "template"); ok {
					if readsHostAuditLog(u) {
						checkHostAuditLogReader(t, c, what, tmpl)
					} else {
						checkPodTemplate(t, c, what, tmpl)
					}
				}
			}
		})
	}
}

// checkPodTemplate dry-run creates the template as a Pod in the namespace
// that enforces the restricted profile.
func checkPodTemplate(t *testing.T, c client.Client, what string, tmpl map[string]any) {
	t.Helper()
	if err := createTemplatePod(t, c, releaseNS, tmpl); err != nil {
		t.Errorf("%s: its pod is refused: %v", what, err)
	}
}

func createTemplatePod(t *testing.T, c client.Client, ns string, tmpl map[string]any) error {
	t.Helper()
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{
		"name": "template-check", "namespace": ns,
	}, "spec": tmpl["spec"]}}
	return c.Create(t.Context(), pod, client.DryRunAll)
}

// readsHostAuditLog reports whether u is the one workload of the chart that
// is not restricted by design: the runtime.auditLog DaemonSet, which reads
// the API server's log from the node.
func readsHostAuditLog(u *unstructured.Unstructured) bool {
	return u.GetKind() == "DaemonSet" && u.GetLabels()["app.kubernetes.io/component"] == "runtime-audit-log"
}

// checkHostAuditLogReader: the audit log DaemonSet's pod is refused where
// the restricted profile is enforced (so the documentation's warning holds)
// and accepted in a privileged namespace.
func checkHostAuditLogReader(t *testing.T, c client.Client, what string, tmpl map[string]any) {
	t.Helper()
	if err := createTemplatePod(t, c, releaseNS, tmpl); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("%s: its pod in a restricted namespace: %v, want a PodSecurity refusal", what, err)
	}
	const privileged = "portal-privileged"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: privileged, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "privileged",
	}}}
	if err := c.Create(t.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := createTemplatePod(t, c, privileged, tmpl); err != nil {
		t.Errorf("%s: its pod in a privileged namespace is refused: %v", what, err)
	}
}

// The check above can fail: a privileged pod is refused in that namespace.
func TestRestrictedNamespaceRefusesPrivilegedPod(t *testing.T) {
	c, _ := adminClient(t)
	checkPrivileged := func() error {
		pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "privileged", "namespace": releaseNS},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x",
				"securityContext": map[string]any{"privileged": true}}}}}}
		return c.Create(t.Context(), pod, client.DryRunAll)
	}
	if err := checkPrivileged(); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("privileged pod: %v, want a PodSecurity refusal", err)
	}
}

// logSink collects Portal's log lines for the test to read.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Portal, with exactly the RBAC the chart renders for admission, audit and
// the WAF, does its job: it elects a leader, issues its certificate, writes
// the webhook configuration that denies a violating pod, reports an audit
// finding, writes rule status, and is never refused by the API server.
func TestChartRBACIsEnoughForPortal(t *testing.T) {
	c, cl := adminClient(t)
	ctx := t.Context()
	manifest, err := render(t, "", "audit.enabled=true", "waf.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	sa := ""
	for _, u := range objects(t, manifest) {
		switch u.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := c.Create(ctx, u); err != nil {
				t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
			}
			if u.GetKind() == "ServiceAccount" && u.GetLabels()["app.kubernetes.io/component"] != "uninstall" {
				sa = u.GetName()
			}
		}
	}
	const team = "team-rbac"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}}); err != nil {
		t.Fatal(err)
	}
	for name, spec := range map[string]string{
		"deny-label":  `{"mode":["admission"],"match":{"gvk":[{"group":"","version":"v1","kind":"Pod"}]},"rule":"metadata.labels[\"portal-test\"] == \"deny\"","message":"denied by deny-label"}`,
		"audit-label": `{"mode":["audit"],"match":{"gvk":[{"group":"","version":"v1","kind":"Pod"},{"group":"apps","version":"v1","kind":"Deployment"}]},"rule":"metadata.labels[\"portal-test\"] == \"audit\"","message":"found by audit-label"}`,
	} {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "portal.io", Version: "v1alpha1", Kind: "PortalClusterRule"})
		u.SetName(name)
		if err := u.UnmarshalJSON([]byte(`{"apiVersion":"portal.io/v1alpha1","kind":"PortalClusterRule","metadata":{"name":"` + name + `"},"spec":` + spec + `}`)); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("PortalClusterRule %s: %v", name, err)
		}
	}

	// Portal as the chart runs it (the chart's defaults for names), but on
	// 127.0.0.1 next to the test API server and as the chart's
	// ServiceAccount.
	restCfg := rest.CopyConfig(cl.Config)
	restCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + releaseNS + ":" + sa}
	logs := &logSink{}
	cfg := manager.Defaults()
	cfg.Namespace = releaseNS
	// The chart's default: HTTPS metrics checked by TokenReview and
	// SubjectAccessReview, which Portal's ServiceAccount must be allowed.
	metricsAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg.MetricsAddr, cfg.MetricsSecure, cfg.HealthAddr = metricsAddr, true, "0"
	cfg.LeaderElectionID = "portal"
	cfg.Admission.Enabled = true
	cfg.Admission.LocalURL = true
	cfg.Admission.Host = "127.0.0.1"
	cfg.Admission.Port = freePort(t)
	cfg.Admission.ConfigName = "portal"
	cfg.Admission.ServiceName = "portal-webhook"
	cfg.Admission.CertSecret = "portal-webhook-cert"
	cfg.Audit.Enabled = true
	cfg.WAF = true
	cfg.WAFOptions.CacheAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// client-go's informers report a refused list or watch through klog.
	klog.SetLogger(logr.FromSlogHandler(cfg.Logger.Handler()))
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- manager.Run(runCtx, restCfg, cfg) }()
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("portal: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		stop()
		// The webhook would outlive Portal in the shared control plane.
		_ = c.Delete(context.Background(), &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration", "metadata": map[string]any{"name": "portal"}}})
	})

	pod := func(name, label string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: team, Labels: map[string]string{"portal-test": label}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
		}
	}
	var denyErr error
	devtest.Eventually(t, "the webhook to deny the violating pod", func() bool {
		denyErr = c.Create(ctx, pod("denied", "deny"), client.DryRunAll)
		return denyErr != nil && strings.Contains(denyErr.Error(), "denied by deny-label")
	})
	if err := c.Create(ctx, pod("audited", "audit")); err != nil {
		t.Fatal(err)
	}
	devtest.Eventually(t, "a PolicyReport in "+team, func() bool {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(schema.GroupVersionKind{Group: "wgpolicyk8s.io", Version: "v1alpha2", Kind: "PolicyReportList"})
		if err := c.List(ctx, l, client.InNamespace(team)); err != nil {
			t.Fatal(err)
		}
		return len(l.Items) > 0
	})
	devtest.Eventually(t, "rule status written", func() bool {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "portal.io", Version: "v1alpha1", Kind: "PortalClusterRule"})
		if err := c.Get(ctx, client.ObjectKey{Name: "deny-label"}, u); err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		return len(conds) > 0
	})
	lease := &unstructured.Unstructured{}
	lease.SetGroupVersionKind(schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"})
	if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "portal"}, lease); err != nil {
		t.Errorf("leader election Lease: %v", err)
	}
	checkMetricsAccess(t, c, cl, metricsAddr)

	// Everything above needed the API server, and any refusal on the way
	// was logged.
	if l := logs.String(); strings.Contains(strings.ToLower(l), "forbidden") {
		for _, line := range strings.Split(l, "\n") {
			if strings.Contains(strings.ToLower(line), "forbidden") {
				t.Errorf("Portal was refused by the API server with the chart's RBAC: %s", line)
			}
		}
	}

	stop()
	runUninstallHook(t, c, cl, manifest)
}

// runUninstallHook runs the command of the chart's pre-delete Job, as the
// Job's own ServiceAccount (created by the caller with the rest of the
// render's RBAC), against the chart's Deployment: the webhook configuration
// goes and Portal is scaled to zero.
func runUninstallHook(t *testing.T, c client.Client, cl *devcluster.Cluster, manifest []byte) {
	t.Helper()
	ctx := t.Context()
	var hookArgs []string
	sa := ""
	for _, u := range objects(t, manifest) {
		switch u.GetKind() {
		case "Deployment":
			if err := c.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
		case "Job":
			containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			hookArgs, _, _ = unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
			sa, _, _ = unstructured.NestedString(u.Object, "spec", "template", "spec", "serviceAccountName")
		}
	}
	if len(hookArgs) == 0 {
		t.Fatal("the render has no uninstall hook Job")
	}
	kubeconfig, err := cl.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = "system:serviceaccount:" + releaseNS + ":" + sa
	}
	dir := t.TempDir()
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kcPath); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "portal")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/portal").CombinedOutput(); err != nil {
		t.Fatalf("build portal: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin, append(hookArgs, "--kubeconfig="+kcPath)...).CombinedOutput()
	if err != nil {
		t.Fatalf("portal %s as the hook's ServiceAccount %s: %v\n%s", strings.Join(hookArgs, " "), sa, err, out)
	}
	vwc := &unstructured.Unstructured{}
	vwc.SetGroupVersionKind(schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"})
	if err := c.Get(ctx, client.ObjectKey{Name: "portal"}, vwc); !apierrors.IsNotFound(err) {
		t.Errorf("webhook configuration after the uninstall hook: %v, want not found", err)
	}
	d := &unstructured.Unstructured{}
	d.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	if err := c.Get(ctx, client.ObjectKey{Namespace: releaseNS, Name: "portal"}, d); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); n != 0 {
		t.Errorf("Deployment replicas after the uninstall hook: %d, want 0", n)
	}
}

// podAntiAffinity auto asks the cluster (lookup) how many nodes it has:
// required anti-affinity with two or more, preferred with fewer, so a
// one-node cluster can still run two replicas.
func TestAntiAffinityAutoFollowsNodeCount(t *testing.T) {
	c, cl := adminClient(t)
	kubeconfig, err := cl.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	affinity := func() string {
		t.Helper()
		// A release of its own: the RBAC test's objects in releaseNS belong
		// to no release, which a server-side dry run refuses to adopt.
		cmd := exec.Command(helmBinary(t), "template", "affinity", chartDir, "--namespace", "portal-affinity",
			"--dry-run=server", "--kubeconfig", kcPath, "--show-only", "templates/deployment.yaml",
			"--set", "networkPolicy.webhookFromAnywhere=true")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm template --dry-run=server: %v\n%s", err, out)
		}
		switch {
		case bytes.Contains(out, []byte("requiredDuringSchedulingIgnoredDuringExecution")):
			return "required"
		case bytes.Contains(out, []byte("preferredDuringSchedulingIgnoredDuringExecution")):
			return "preferred"
		}
		return "none"
	}
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "portal-affinity"}}); err != nil {
		t.Fatal(err)
	}
	nodes := &corev1.NodeList{}
	if err := c.List(t.Context(), nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) > 1 {
		t.Fatalf("the test control plane already has %d nodes", len(nodes.Items))
	}
	if got := affinity(); got != "preferred" {
		t.Errorf("with %d node(s): %s anti-affinity, want preferred", len(nodes.Items), got)
	}
	for i := len(nodes.Items); i < 2; i++ {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + strconv.Itoa(i)}}
		if err := c.Create(t.Context(), n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), n) })
	}
	if got := affinity(); got != "required" {
		t.Errorf("with 2 nodes: %s anti-affinity, want required", got)
	}
}

// checkMetricsAccess scrapes /metrics with the token of a ServiceAccount
// bound to the chart's metrics-reader ClusterRole (200) and of one that is
// not (403): Portal could review both tokens with the chart's RBAC.
func checkMetricsAccess(t *testing.T, c client.Client, cl *devcluster.Cluster, addr string) {
	t.Helper()
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(cl.Config)
	token := func(name string) string {
		t.Helper()
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: releaseNS}}
		if err := c.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(releaseNS).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper-portal-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "portal-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: releaseNS}},
	}
	if err := c.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	scraper, stranger := token("scraper"), token("stranger")
	// Portal's metrics certificate is self-signed.
	httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	scrape := func(tok string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := httpc.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	var got int
	devtest.Eventually(t, "a scrape with the metrics-reader token", func() bool { got = scrape(scraper); return got == http.StatusOK })
	if got := scrape(stranger); got != http.StatusForbidden {
		t.Errorf("scrape with a token not bound to metrics-reader: HTTP %d, want 403", got)
	}
}
