package admission_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/freeport"
)

// openPath stands for the verdict forwarding endpoint: the one path whose
// callers authenticate by token, not by certificate.
const openPath = "/forward/verdicts"

// guardedWebhook is a webhook server started with --webhook-client-ca-file
// and a ClientGuard, with a handler counting its requests on each path.
type guardedWebhook struct {
	port    int
	serving *servingCert
	metrics *admission.ClientCAMetrics
	clock   *clocktesting.FakeClock
	caFile  string
	reached map[string]*atomic.Int64
}

// startGuardedWebhook serves paths on a webhook server guarded with open
// as the open path list, accepting client certificates of caPEM named
// apiServerClientName.
func startGuardedWebhook(t *testing.T, caPEM []byte, open []string, paths ...string) *guardedWebhook {
	t.Helper()
	serving, err := newServingCert()
	if err != nil {
		t.Fatal(err)
	}
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	g := &guardedWebhook{port: port, serving: serving, metrics: admission.NewClientCAMetrics(),
		clock: clocktesting.NewFakeClock(time.Now()), caFile: filepath.Join(t.TempDir(), "client-ca.crt"), reached: map[string]*atomic.Int64{}}
	if err := os.WriteFile(g.caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	guard := admission.NewClientGuard(open, g.metrics, log)
	clientAuth, err := admission.ClientAuthFile(g.caFile, admission.ClientCAOptions{AllowedNames: []string{apiServerClientName},
		Logger: log, Metrics: g.metrics, Clock: g.clock, Guard: guard})
	if err != nil {
		t.Fatal(err)
	}
	srv := guard.Server(webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port,
		TLSOpts: append(admission.TLSOptions(serving.GetCertificate), clientAuth)}))
	if srv.WebhookMux() != nil {
		t.Error("the guarded server hands out its mux: a handler added there would escape the guard")
	}
	for _, p := range paths {
		n := &atomic.Int64{}
		g.reached[p] = n
		srv.Register(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
		}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: serving.pool})
		if err == nil {
			_ = conn.Close()
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("the webhook server does not serve:", err)
	}
	return g
}

// post posts to path with cert as the client certificate (nil: none)
// and returns the status code, or the error of a refused handshake.
func (g *guardedWebhook) post(path string, cert *tls.Certificate) (int, error) {
	tc := &tls.Config{RootCAs: g.serving.pool}
	if cert != nil {
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := hc.Post(fmt.Sprintf("https://127.0.0.1:%d%s", g.port, path), "application/json", strings.NewReader("{}"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

func (g *guardedWebhook) refused(path string) float64 {
	return testutil.ToFloat64(g.metrics.Refused.WithLabelValues(path))
}

// TestClientGuardRequiresTheCertificateOnEveryPathButTheOpenOne: with
// --webhook-client-ca-file and the forwarding endpoint served, a caller
// without a client certificate reaches the forwarding endpoint (which
// checks its token itself) and nothing else: not the admission path, not
// a path registered later that nobody listed (a conversion webhook), each
// refused with 401 before its handler runs and counted. A certificate
// that is presented is still checked at the handshake (CA and name) on
// every path, and a rotated CA is in force without a restart.
func TestClientGuardRequiresTheCertificateOnEveryPathButTheOpenOne(t *testing.T) {
	ca, err := newTestCA("api-server-webhook-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	apiServer, _, _, err := ca.issueClient(apiServerClientName)
	if err != nil {
		t.Fatal(err)
	}
	mallory, _, _, err := ca.issueClient("mallory")
	if err != nil {
		t.Fatal(err)
	}
	g := startGuardedWebhook(t, ca.pem, []string{openPath}, admission.Path, openPath, "/convert")

	for _, path := range []string{admission.Path, "/convert"} {
		if code, err := g.post(path, nil); err != nil || code != http.StatusUnauthorized {
			t.Errorf("%s without a client certificate: HTTP %d %v, want 401", path, code, err)
		}
		if n := g.reached[path].Load(); n != 0 {
			t.Errorf("%s: a caller without a certificate reached the handler %d times", path, n)
		}
		if got := g.refused(path); got != 1 {
			t.Errorf("refused on %s: %v, want 1", path, got)
		}
		if code, err := g.post(path, &apiServer); err != nil || code != http.StatusOK {
			t.Errorf("%s with the API server's certificate: HTTP %d %v", path, code, err)
		}
	}
	if code, err := g.post(openPath, nil); err != nil || code != http.StatusOK || g.reached[openPath].Load() != 1 {
		t.Errorf("the open path without a client certificate: HTTP %d %v, want it served", code, err)
	}
	if got := g.refused(openPath); got != 0 {
		t.Errorf("refused on the open path: %v", got)
	}
	// A certificate presented must be the right one, on every path.
	for _, path := range []string{admission.Path, openPath} {
		if code, err := g.post(path, &mallory); err == nil {
			t.Errorf("%s with a certificate of another name: HTTP %d, want the handshake refused", path, code)
		}
	}

	// The CA rotates: its clients are in, the old one's refused.
	ca2, err := newTestCA("rotated-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	next, _, _, err := ca2.issueClient(apiServerClientName)
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, g.caFile, ca2.pem)
	g.clock.Step(admission.ClientCARecheck)
	eventually(t, "the rotated CA's client accepted", func() bool {
		code, err := g.post(admission.Path, &next)
		return err == nil && code == http.StatusOK
	})
	if code, err := g.post(admission.Path, &apiServer); err == nil {
		t.Errorf("the replaced CA's client: HTTP %d, want the handshake refused", code)
	}
}

// TestClientGuardDemandsTheCertificateWithoutAnOpenPath: while the
// forwarding endpoint is not served, the handshake demands the
// certificate, as it did before the guard: nothing on the network without
// one gets an HTTP answer.
func TestClientGuardDemandsTheCertificateWithoutAnOpenPath(t *testing.T) {
	ca, err := newTestCA("api-server-webhook-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	g := startGuardedWebhook(t, ca.pem, []string{openPath}, admission.Path)
	if code, err := g.post(admission.Path, nil); err == nil {
		t.Errorf("without a client certificate: HTTP %d, want the handshake refused", code)
	}
	if code, err := g.post(openPath, nil); err == nil {
		t.Errorf("the open path, not served: HTTP %d, want the handshake refused", code)
	}
}
