package admission_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// apiServerClientName is the name in the client certificate the API server
// presents to webhooks in this test (--webhook-client-allowed-names).
const apiServerClientName = "kube-apiserver-webhook-client"

// webhookClientConfig writes the AdmissionConfiguration that makes
// kube-apiserver present certPEM/keyPEM to every webhook, and returns its
// path: what docs/operator/webhook-client-certificates.md describes.
func webhookClientConfig(t *testing.T, certPEM, keyPEM []byte) string {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "webhook-client.kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate-data: %s
    client-key-data: %s
`, base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(keyPEM))
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "admission-config.yaml")
	ac := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %q
`, kubeconfig)
	if err := os.WriteFile(cfg, []byte(ac), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestWebhookAcceptsOnlyTheAPIServer runs a kube-apiserver configured to
// present a client certificate to webhooks, and a Portal that requires one
// (--webhook-client-ca-file, --webhook-client-allowed-names): the API
// server's requests are decided as usual, while a client on the network
// without that certificate, with a certificate from another CA, or with
// another name from the same CA, cannot even complete a request.
func TestWebhookAcceptsOnlyTheAPIServer(t *testing.T) {
	cluster(t) // the scheme and the serving certificate
	ctx := context.Background()
	ca, err := newTestCA("api-server-webhook-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	cl, apiCert := startClientCertCluster(ctx, t, ca)
	p := startClientAuthPortal(t, cl, ca, &apiCert)

	c, err := client.New(cl.Config, client.Options{Scheme: env.scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "team"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// The API server reaches Portal with its certificate: the rule decides.
	eventually(t, "the API server's requests decided by Portal", func() bool {
		err := c.Create(ctx, pod(ns, "privileged", true), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "[no-privileged] privileged")
	})
	if err := c.Create(ctx, pod(ns, "plain", false), client.DryRunAll); err != nil {
		t.Fatalf("a plain pod: %v", err)
	}

	post := func(cert *tls.Certificate) (int, error) {
		return postReview(p, cert, review("direct", "CREATE", ns, true))
	}
	checkRefusedClients(t, p, ca, post)
	// The same request with the API server's certificate is decided: the
	// refusals above are about the certificate, not the request.
	if code, err := post(&apiCert); err != nil || code != http.StatusOK {
		t.Fatalf("with the API server's certificate: %d %v", code, err)
	}
}

// startClientCertCluster starts a control plane whose API server presents a
// client certificate from ca, with the name Portal allows, to webhooks; it
// returns the control plane and that certificate.
func startClientCertCluster(ctx context.Context, t *testing.T, ca *testCA) (*devcluster.Cluster, tls.Certificate) {
	t.Helper()
	apiCert, certPEM, keyPEM, err := ca.issueClient(apiServerClientName)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := devcluster.Start(ctx, devcluster.Options{
		CRDDirectoryPaths: []string{},
		APIServerFlags:    map[string]string{"admission-control-config-file": webhookClientConfig(t, certPEM, keyPEM)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Stop(); err != nil {
			t.Error(err)
		}
	})
	return cl, apiCert
}

// startClientAuthPortal starts a Portal with a rule against privileged pods
// that requires a client certificate from ca with the API server's name.
func startClientAuthPortal(t *testing.T, cl *devcluster.Cluster, ca *testCA, apiCert *tls.Certificate) *portal {
	t.Helper()
	eng := engine.New(exprlang.New())
	r, err := eng.Compile(&core.Rule{Name: "no-privileged", Enabled: true, Modes: []core.Mode{core.ModeAdmission},
		EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny, Match: core.Match{GVKs: []core.GVK{{Version: "v1", Kind: "Pod"}}},
		Expression: "container.securityContext.privileged == true", Message: "privileged"})
	if err != nil {
		t.Fatal(err)
	}
	eng.SetRules([]*engine.Rule{r})
	clientAuth, err := admission.ClientAuth(ca.pem, []string{apiServerClientName})
	if err != nil {
		t.Fatal(err)
	}
	p, err := startPortal(portalOptions{name: "portal-client-auth", logs: &syncWriter{}, evaluator: eng, rules: eng,
		cfg: cl.Config, tls: []func(*tls.Config){clientAuth}, clientCert: apiCert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.stop() })
	return p
}

// postReview posts body to p's webhook over TLS, with cert as the client
// certificate when it is not nil.
func postReview(p *portal, cert *tls.Certificate, body string) (int, error) {
	tc := &tls.Config{RootCAs: env.cert.pool}
	if cert != nil {
		// Sent whatever CAs the server asks for, as an attacker would.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := hc.Post(admission.LocalURL(p.port), "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// checkRefusedClients checks that a client without a certificate, with one
// from another CA, or with another name from ca cannot complete a request,
// and that none reached the handler.
func checkRefusedClients(t *testing.T, p *portal, ca *testCA, post func(*tls.Certificate) (int, error)) {
	t.Helper()
	decided := handled(p)
	other, err := newTestCA("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	rogue, _, _, err := other.issueClient(apiServerClientName)
	if err != nil {
		t.Fatal(err)
	}
	mallory, _, _, err := ca.issueClient("mallory")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"no client certificate", nil},
		{"a certificate from another CA, with the API server's name", &rogue},
		{"a certificate from the API server's CA, with another name", &mallory},
	} {
		if code, err := post(tc.cert); err == nil {
			t.Errorf("%s: the webhook answered HTTP %d, want the TLS handshake refused", tc.name, code)
		} else {
			t.Logf("%s: refused: %v", tc.name, err)
		}
	}
	if got := handled(p); got != decided {
		t.Errorf("refused clients reached the handler: %v decisions, was %v", got, decided)
	}
}

// handled counts every request p's handler saw: decided or malformed.
func handled(p *portal) float64 {
	m := p.webhook.Metrics()
	n := 0.0
	for _, d := range []string{admission.DecisionAllowed, admission.DecisionDenied, admission.DecisionWarned, admission.DecisionBypassed, admission.DecisionError} {
		n += testutil.ToFloat64(m.Requests.WithLabelValues(d))
	}
	return n + sumMalformed(m)
}

func sumMalformed(m *admission.Metrics) float64 {
	n := 0.0
	for _, r := range []string{admission.MalformedMethod, admission.MalformedContentType, admission.MalformedTooLarge, admission.MalformedUnreadable,
		admission.MalformedNotJSON, admission.MalformedWrongType, admission.MalformedNoRequest, admission.MalformedInvalidRequest,
		admission.MalformedObjectUndecoded, admission.MalformedObjectShape} {
		n += testutil.ToFloat64(m.Malformed.WithLabelValues(r))
	}
	return n
}
