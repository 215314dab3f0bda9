package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vilaca/portal/internal/freeport"
)

// TestMetricsNeedAnAuthorizedToken runs Portal with the default metrics
// settings against a real API server: /metrics is HTTPS, refuses a scrape
// without a token (401), with a token the API server does not know (401)
// and with a ServiceAccount token without RBAC for it (403), and serves a
// ServiceAccount token bound to get on the /metrics non-resource URL, as a
// Prometheus in the cluster would be.
func TestMetricsNeedAnAuthorizedToken(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	cs, err := kubernetes.NewForConfig(cl.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "monitoring"
	scraper, nobody := serviceAccountTokens(t, cs, ns)

	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.MetricsAddr = fmt.Sprintf("127.0.0.1:%d", port)
	cfg.HealthAddr = "0"
	cfg.LeaderElection = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, cl.Config, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	// The certificate is self-signed: what the scraper proves is its token.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	url := fmt.Sprintf("https://127.0.0.1:%d/metrics", port)
	scrape := func(token string) (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		_, _, err := scrape("")
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("metrics server not serving HTTPS on %s: %v", url, err)
	}

	for _, tc := range []struct {
		name, token string
		code        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token the API server does not know", "not-a-token", http.StatusUnauthorized},
		{"a ServiceAccount without RBAC for /metrics", nobody, http.StatusForbidden},
	} {
		code, body, err := scrape(tc.token)
		if err != nil || code != tc.code {
			t.Errorf("%s: got %d %v, want %d", tc.name, code, err, tc.code)
		}
		if strings.Contains(body, "portal_") {
			t.Errorf("%s: the response holds metrics:\n%.300s", tc.name, body)
		}
	}
	code, body, err := scrape(scraper)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "controller_runtime_reconcile_total") {
		t.Fatalf("authorized scraper: %d %v:\n%.300s", code, err, body)
	}

	// Plain HTTP is not served on the HTTPS port.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "portal_") {
			t.Errorf("plain HTTP scrape: %d:\n%.300s", resp.StatusCode, body)
		}
	}
}

// serviceAccountTokens creates two ServiceAccounts in ns, binds the first
// to a ClusterRole allowing get on /metrics, and returns a token of each.
func serviceAccountTokens(t *testing.T, cs kubernetes.Interface, ns string) (scraper, nobody string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "portal-metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-portal-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for _, name := range []string{"prometheus", "nobody"} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tr.Status.Token)
	}
	return tokens[0], tokens[1]
}

// TestMetricsPlainHTTPOnlyWhenAsked: the default is HTTPS with
// authentication and authorization; plain HTTP is an explicit choice.
func TestMetricsPlainHTTPOnlyWhenAsked(t *testing.T) {
	cfg := Defaults()
	o := metricsOptions(&cfg)
	if !o.SecureServing || o.FilterProvider == nil {
		t.Fatalf("defaults: SecureServing %v, filter %v: want HTTPS with authentication and authorization", o.SecureServing, o.FilterProvider != nil)
	}
	cfg.MetricsSecure = false
	if o := metricsOptions(&cfg); o.SecureServing || o.FilterProvider != nil {
		t.Fatalf("--metrics-secure=false: SecureServing %v, filter %v", o.SecureServing, o.FilterProvider != nil)
	}
}
