package runtime_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/runtime"
)

type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	tls  tls.Certificate
}

// issue makes a certificate signed by parent (self-signed when nil), for
// cn and the DNS names dns.
func issue(t *testing.T, cn string, parent *keyPair, isCA bool, dns ...string) *keyPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: dns,
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &keyPair{cert: cert, key: key, tls: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

const (
	auditToken = "audit-token-0123456789"
	falcoToken = "falco-token-0123456789"
)

// endpoint serves the runtime endpoint over TLS on 127.0.0.1 with a client
// CA and both tokens; it returns the URL, the CA the API server's client
// certificate comes from, and the server's CA for clients.
func endpoint(t *testing.T, h *harness, o runtime.ServerOptions) (string, *keyPair, *x509.CertPool) {
	t.Helper()
	url, clientCA, roots, _ := endpointCA(t, h, o)
	return url, clientCA, roots
}

// endpointCA is endpoint, also returning the client CA's file.
func endpointCA(t *testing.T, h *harness, o runtime.ServerOptions) (string, *keyPair, *x509.CertPool, string) {
	t.Helper()
	clientCA := issue(t, "apiserver-client-ca", nil, true)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pemOf(clientCA.cert), 0o600); err != nil {
		t.Fatal(err)
	}
	o.ClientCAFile, o.AuditToken, o.FalcoToken = caFile, auditToken, falcoToken
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := runtime.NewServer(o, h.src, h.metrics)
	if err != nil {
		t.Fatal(err)
	}
	serving := issue(t, "portal", nil, true)
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	ts.TLS = srv.TLSConfig(nil)
	// httptest serves its own certificate unless given one.
	ts.TLS.Certificates = []tls.Certificate{serving.tls}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	roots := x509.NewCertPool()
	roots.AddCert(serving.cert)
	return ts.URL, clientCA, roots, caFile
}

func post(t *testing.T, url string, roots *x509.CertPool, cert *keyPair, token string, body []byte) (int, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.tls}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func eventList(t *testing.T, evs ...event.Event) []byte {
	t.Helper()
	b, err := json.Marshal(event.EventList{Kind: "EventList", APIVersion: "audit.k8s.io/v1", Items: evs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWebhookRefusesCallersWithoutCredentials: only the API server's
// client certificate (or the audit token) is accepted; everything else is
// refused before the body is read.
func TestWebhookRefusesCallersWithoutCredentials(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	url, clientCA, roots := endpoint(t, h, runtime.ServerOptions{MaxBatch: 3, MaxBodyBytes: 64 << 10})
	body := eventList(t, execEvent("w1", event.StageResponseStarted))
	apiserver := issue(t, "kube-apiserver-kubelet-client", clientCA, false)
	stranger := issue(t, "kube-apiserver-kubelet-client", issue(t, "another-ca", nil, true), false)
	for _, c := range []struct {
		name  string
		cert  *keyPair
		token string
		want  int
	}{
		{"anonymous", nil, "", http.StatusUnauthorized},
		{"wrong token", nil, "audit-token-0123456788", http.StatusUnauthorized},
		{"falco's token on /audit", nil, falcoToken, http.StatusUnauthorized},
		{"API server client certificate", apiserver, "", http.StatusOK},
		{"audit token", nil, auditToken, http.StatusOK},
	} {
		got, err := post(t, url+runtime.PathAudit, roots, c.cert, c.token, body)
		if err != nil || got != c.want {
			t.Errorf("%s: %d %v, want %d", c.name, got, err, c.want)
		}
	}
	// A certificate of another CA fails the handshake or is refused.
	if got, err := post(t, url+runtime.PathAudit, roots, stranger, "", body); err == nil && got != http.StatusUnauthorized {
		t.Errorf("a certificate of another CA: %d", got)
	}
	if got := counter(t, h.metrics.Received.WithLabelValues(runtime.InputWebhook)); got != 2 {
		t.Errorf("events received = %v, want 2 (the two authenticated posts)", got)
	}
	tooMany := eventList(t, execEvent("1", "x"), execEvent("2", "x"), execEvent("3", "x"), execEvent("4", "x"))
	if got, _ := post(t, url+runtime.PathAudit, roots, nil, auditToken, tooMany); got != http.StatusBadRequest {
		t.Errorf("4 events with --runtime-max-batch 3: %d", got)
	}
	if got, _ := post(t, url+runtime.PathAudit, roots, nil, auditToken, bytes.Repeat([]byte(" "), 65<<10)); got != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the bound: %d", got)
	}
	if got, _ := post(t, url+runtime.PathAudit, roots, nil, auditToken, []byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`)); got != http.StatusBadRequest {
		t.Errorf("not an EventList: %d", got)
	}
}

// TestWebhookFloodDropsAndCounts: a flood larger than the queue is
// answered at once, every batch 200, the excess dropped and counted: the
// API server never waits on evaluation (no worker runs here at all).
func TestWebhookFloodDropsAndCounts(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{QueueSize: 100})
	url, _, roots := endpoint(t, h, runtime.ServerOptions{RequestRate: 1000, RequestBurst: 1000})
	var evs []event.Event
	for i := range 50 {
		evs = append(evs, execEvent("f"+string(rune('A'+i)), event.StageResponseStarted))
	}
	body := eventList(t, evs...)
	for range 10 {
		if got, err := post(t, url+runtime.PathAudit, roots, nil, auditToken, body); err != nil || got != http.StatusOK {
			t.Fatalf("flood batch: %d %v", got, err)
		}
	}
	if got := counter(t, h.metrics.QueueDepth.WithLabelValues(runtime.InputWebhook)); got != 100 {
		t.Errorf("queued from the webhook = %v, want 100", got)
	}
	if got := queued(t, h.metrics); got != 100 {
		t.Errorf("queued = %v, want 100, all from the webhook", got)
	}
	if got := counter(t, h.metrics.Dropped.WithLabelValues(runtime.InputWebhook, runtime.DropQueueFull)); got != 400 {
		t.Errorf("dropped = %v, want 400", got)
	}
}

// TestWebhookRateLimited: beyond its request rate the endpoint answers
// 429 at once, so the API server's backend retries later.
func TestWebhookRateLimited(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	url, _, roots := endpoint(t, h, runtime.ServerOptions{RequestRate: 0.001, RequestBurst: 2})
	body := eventList(t)
	var codes []int
	for range 3 {
		got, _ := post(t, url+runtime.PathAudit, roots, nil, auditToken, body)
		codes = append(codes, got)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != http.StatusTooManyRequests {
		t.Errorf("codes = %v, want 200 200 429", codes)
	}
}

// TestFalcoAlertsQuarantineNamedPod: alerts in Falco's and Falcosidekick's
// JSON (recorded from Falco's documented output fields) reach a rule as
// event.falco.*, about the pod they name, and hand the quarantine label
// to the actions for that pod's UID; an alert about a host process names
// no pod and reaches no rule.
func TestFalcoAlertsQuarantineNamedPod(t *testing.T) {
	rules := `
apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata: {name: falco-quarantine}
spec:
  severity: critical
  mode: [runtime]
  runtime: {events: [falco]}
  match: {gvk: [{group: "", version: v1, kind: Pod}]}
  rule: event.falco.priority in ["Emergency", "Alert", "Critical", "Error", "Warning", "Notice"] && event.falco.output_fields["container.name"] != nil
  message: 'Falco: {{ event.falco.rule }} in {{ event.falco.output_fields["k8s.pod.name"] }}'
  actions:
  - {type: label, key: portal.io/quarantine, value: "true"}
`
	h := newHarness(t, rules, []string{webPod}, runtime.Options{})
	url, _, roots := endpoint(t, h, runtime.ServerOptions{})
	files, _ := filepath.Glob("testdata/falco/*.json")
	for _, f := range files {
		body, _ := os.ReadFile(f)
		if got, err := post(t, url+runtime.PathFalco, roots, nil, falcoToken, body); err != nil || got != http.StatusOK {
			t.Fatalf("%s: %d %v", f, got, err)
		}
	}
	if got, _ := post(t, url+runtime.PathFalco, roots, nil, auditToken, []byte(`{}`)); got != http.StatusUnauthorized {
		t.Errorf("the audit token on /falco: %d", got)
	}
	drain(t, h, 2)
	vs := h.verdicts.all()
	if len(vs) != 2 {
		t.Fatalf("verdicts = %d, want 2 (one per alert about web-0; the host alert names no pod)", len(vs))
	}
	want := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: "prod", Name: "web-0", UID: "pod-uid-1"}
	var msgs []string
	for _, v := range vs {
		if v.Resource != want || v.Rule.Actions[0].Type != "label" {
			t.Errorf("verdict on %+v, want %+v", v.Resource, want)
		}
		msgs = append(msgs, v.Message)
	}
	joined := strings.Join(msgs, "|")
	if !strings.Contains(joined, "Falco: Terminal shell in container in web-0") || !strings.Contains(joined, "Falco: Read sensitive file untrusted in web-0") {
		t.Errorf("messages = %v", msgs)
	}
	if got := counter(t, h.metrics.Skipped.WithLabelValues(runtime.SkipNoObject)); got != 1 {
		t.Errorf("alerts naming no pod = %v, want 1", got)
	}
}

// TestEachInputHasItsOwnRateAndQueue: a flood on /falco spends Falco's
// request rate and fills Falco's queue only: the API server's batches are
// still served and queued, and the other way round.
func TestEachInputHasItsOwnRateAndQueue(t *testing.T) {
	alertJSON, err := os.ReadFile("testdata/falco/terminal-shell.json")
	if err != nil {
		t.Fatal(err)
	}
	alert, err := event.DecodeFalco(alertJSON)
	if err != nil {
		t.Fatal(err)
	}
	audit := func(i int) event.Event { return execEvent(fmt.Sprint("q", i), event.StageResponseStarted) }

	h := newHarness(t, execRules, []string{webPod}, runtime.Options{QueueSize: 10, FalcoQueueSize: 5})
	url, _, roots := endpoint(t, h, runtime.ServerOptions{RequestRate: 0.001, RequestBurst: 3})
	for i := range 6 {
		want := http.StatusOK
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if got, err := post(t, url+runtime.PathFalco, roots, nil, falcoToken, alertJSON); err != nil || got != want {
			t.Fatalf("Falco alert %d: %d %v, want %d", i, got, err, want)
		}
	}
	if got, err := post(t, url+runtime.PathAudit, roots, nil, auditToken, eventList(t, audit(0))); err != nil || got != http.StatusOK {
		t.Errorf("an audit batch after a Falco flood spent Falco's rate: %d %v, want 200", got, err)
	}
	for range 20 {
		h.src.Offer(runtime.InputFalco, alert)
	}
	for i := range 9 {
		if !h.src.Offer(runtime.InputWebhook, audit(i+1)) {
			t.Fatalf("audit event %d dropped after a Falco flood", i+1)
		}
	}
	// 3 alerts posted and 20 offered into a queue of 5; 10 audit events.
	if got := counter(t, h.metrics.Dropped.WithLabelValues(runtime.InputFalco, runtime.DropQueueFull)); got != 18 {
		t.Errorf("Falco alerts dropped = %v, want 18", got)
	}
	if got := counter(t, h.metrics.Dropped.WithLabelValues(runtime.InputWebhook, runtime.DropQueueFull)); got != 0 {
		t.Errorf("audit events dropped = %v, want 0", got)
	}

	// The other way round: an audit flood leaves Falco its rate and queue.
	h = newHarness(t, execRules, []string{webPod}, runtime.Options{QueueSize: 10, FalcoQueueSize: 5})
	url, _, roots = endpoint(t, h, runtime.ServerOptions{RequestRate: 0.001, RequestBurst: 3})
	for range 4 {
		_, _ = post(t, url+runtime.PathAudit, roots, nil, auditToken, eventList(t, audit(0)))
	}
	if got, err := post(t, url+runtime.PathFalco, roots, nil, falcoToken, alertJSON); err != nil || got != http.StatusOK {
		t.Errorf("a Falco alert after an audit flood spent the audit rate: %d %v, want 200", got, err)
	}
	for i := range 50 {
		h.src.Offer(runtime.InputWebhook, audit(i))
	}
	for range 4 {
		if !h.src.Offer(runtime.InputFalco, alert) {
			t.Fatal("a Falco alert dropped after an audit flood")
		}
	}
}
