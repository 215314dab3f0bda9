package manager

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/forward"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
)

// fwdAPIServerName is the name of the client certificate the API server
// would present to webhooks (--webhook-client-allowed-names).
const fwdAPIServerName = "kube-apiserver-webhook-client"

// TestForwardedVerdictsWithWebhookClientCA: with --webhook-client-ca-file
// (and allowed names) on both replicas, a review the API server's
// certificate brings to the replica that does not lead is forwarded, with
// the ServiceAccount token and no certificate, and the leader acts on it
// once. Meanwhile a review without the certificate reaches neither
// replica's admission handler (401, counted), and the forwarding endpoint
// still refuses a caller without the token, with or without the
// certificate.
func TestForwardedVerdictsWithWebhookClientCA(t *testing.T) {
	f := fwdSetup(t, "fwd-ca")
	ca := s3test.NewCA(t, "api-server-webhook-client-ca")
	caFile := filepath.Join(t.TempDir(), "client-ca.crt")
	must(t, os.WriteFile(caFile, ca.PEM, 0o600))
	apiServer, err := tls.X509KeyPair(ca.Client(t, fwdAPIServerName))
	must(t, err)
	withCA := func(c *Config) {
		c.Admission.ClientCAFile = caFile
		c.Admission.ClientAllowedNames = []string{fwdAPIServerName}
		// The shared API server presents no client certificate: failing
		// closed, it could not create the test's pods.
		c.Admission.FailOpen = true
	}
	leader := startFwdReplica(t, f, 0, withCA)
	e := &verdictEnv{t: t, c: f.c, logs: leader.logs, port: leader.port}
	f.waitLeader(e)
	follower := startFwdReplica(t, f, leader.port, withCA)
	waitServing(e, follower.port)

	for name, r := range map[string]fwdReplica{"leader": leader, "follower": follower} {
		handled := counter(t, r.reg, "portal_admission_requests_total") + counter(t, r.reg, "portal_admission_malformed_total")
		refused := gauge(t, r.reg, "portal_admission_clients_refused_total", "path", admission.Path)
		if code := postWebhook(t, r.port, admission.Path, "", nil, []byte("{}")); code != http.StatusUnauthorized {
			t.Errorf("%s: a review without a client certificate: HTTP %d, want 401", name, code)
		}
		if got := counter(t, r.reg, "portal_admission_requests_total") + counter(t, r.reg, "portal_admission_malformed_total"); got != handled {
			t.Errorf("%s: the review without a certificate reached the handler", name)
		}
		// Counted (with the API server's own calls, which lack the
		// certificate in this test, hence no exact count).
		if got := gauge(t, r.reg, "portal_admission_clients_refused_total", "path", admission.Path); got <= refused {
			t.Errorf("%s: refused on %s: %v, was %v", name, admission.Path, got, refused)
		}
	}

	pod := e.pod(fwdTenant, "ca-offender", nil)
	ef := &verdictEnv{t: t, c: f.c, logs: follower.logs, port: follower.port, cert: &apiServer}
	if resp := ef.forge("fwd-ca-1", fwdTenant, "ca-offender", string(pod.UID)); resp.Allowed {
		t.Fatalf("review admitted on the follower: %+v", resp)
	}
	e.poll("the leader labelling the offender", func() bool { return e.results("label", "ca-offender") != "" })
	if got := e.results("label", "ca-offender"); got != "success" {
		t.Errorf("label on the offender by the leader: %q, want one success", got)
	}
	if got := ef.results("label", "ca-offender"); got != "" {
		t.Errorf("the follower acted itself: %q", got)
	}
	if n := gauge(t, follower.reg, "portal_verdicts_forwarded_total", "result", forward.SentAccepted); n != 1 {
		t.Errorf("the follower forwarded %v verdicts, want 1", n)
	}
	if n := counter(t, follower.reg, "portal_actions_dropped_total"); n != 0 {
		t.Errorf("the follower dropped %v verdicts", n)
	}

	// The certificate is no substitute for the token on the forwarding
	// endpoint.
	batch, err := json.Marshal(forward.Batch{Verdicts: []forward.Verdict{{
		ID: "ca-no-token", Rule: forward.RuleRef{Kind: "file", Name: "fwd-deny-bad"},
		Resource: core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: fwdTenant, Name: "ca-offender", UID: string(pod.UID)},
		Message:  "bad pod", Operation: "UPDATE", Denied: true, Observed: time.Now(),
	}}})
	must(t, err)
	for _, cert := range []*tls.Certificate{nil, &apiServer} {
		if code := postWebhook(t, leader.port, forward.Path, "", cert, batch); code != http.StatusUnauthorized {
			t.Errorf("forwarding without a token (client certificate %v): HTTP %d, want 401", cert != nil, code)
		}
	}
	if got := gauge(t, leader.reg, "portal_verdicts_forward_refused_total", "reason", forward.RefusedUnauthenticated); got != 2 {
		t.Errorf("forwarding refused as unauthenticated: %v, want 2", got)
	}
	if got := gauge(t, leader.reg, "portal_verdicts_forward_received_total", "result", forward.ReceivedAccepted); got != 1 {
		t.Errorf("verdicts accepted by the leader: %v, want the follower's one", got)
	}
}

// postWebhook posts body to path on the webhook port with token ("":
// none) and cert (nil: none) and returns the status code.
func postWebhook(t *testing.T, port int, path, token string, cert *tls.Certificate, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("https://127.0.0.1:%d%s", port, path), bytes.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	tc := &tls.Config{InsecureSkipVerify: true}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
