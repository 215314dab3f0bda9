package runtime_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/freeport"
	"github.com/vilaca/portal/internal/runtime"
)

// TestClientIdentityPerPath: the client CA signs more than the API server's
// and Falco's certificates (a cluster CA signs every kubelet's): each path
// accepts only the identities allowed on it, by subject CN or SAN, and
// refuses a certificate of any other name with 403, counted; the path's
// token still passes.
func TestClientIdentityPerPath(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	url, ca, roots := endpoint(t, h, runtime.ServerOptions{})
	audit := eventList(t, execEvent("i1", event.StageResponseStarted))
	falco, err := os.ReadFile("testdata/falco/terminal-shell.json")
	if err != nil {
		t.Fatal(err)
	}
	apiserver := issue(t, "kube-apiserver-kubelet-client", ca, false)
	kubelet := issue(t, "system:node:node-1", ca, false)
	falcoCert := issue(t, "falco", ca, false)
	sidekick := issue(t, "sidekick-0", ca, false, "falcosidekick")
	for _, c := range []struct {
		name, path string
		cert       *keyPair
		token      string
		body       []byte
		want       int
	}{
		{"the API server on /audit", runtime.PathAudit, apiserver, "", audit, http.StatusOK},
		{"a kubelet on /audit", runtime.PathAudit, kubelet, "", audit, http.StatusForbidden},
		{"Falco on /audit", runtime.PathAudit, falcoCert, "", audit, http.StatusForbidden},
		{"a kubelet with the audit token", runtime.PathAudit, kubelet, auditToken, audit, http.StatusOK},
		{"Falco on /falco", runtime.PathFalco, falcoCert, "", falco, http.StatusOK},
		{"Falcosidekick by its DNS SAN on /falco", runtime.PathFalco, sidekick, "", falco, http.StatusOK},
		{"the API server on /falco", runtime.PathFalco, apiserver, "", falco, http.StatusForbidden},
		{"a kubelet on /falco", runtime.PathFalco, kubelet, "", falco, http.StatusForbidden},
	} {
		if got, err := post(t, url+c.path, roots, c.cert, c.token, c.body); err != nil || got != c.want {
			t.Errorf("%s: %d %v, want %d", c.name, got, err, c.want)
		}
	}
	for in, want := range map[string]float64{runtime.InputWebhook: 2, runtime.InputFalco: 2} {
		if got := counter(t, h.metrics.Refused.WithLabelValues(in, runtime.RefuseIdentity)); got != want {
			t.Errorf("%s refused for identity = %v, want %v", in, got, want)
		}
	}
	if got := counter(t, h.metrics.Received.WithLabelValues(runtime.InputWebhook)); got != 2 {
		t.Errorf("audit events received = %v, want 2 (the allowed posts only)", got)
	}

	// Names of one's own replace the defaults.
	url, ca, roots = endpoint(t, h, runtime.ServerOptions{AuditNames: []string{"portal-audit"}})
	if got, _ := post(t, url+runtime.PathAudit, roots, issue(t, "kube-apiserver-kubelet-client", ca, false), "", audit); got != http.StatusForbidden {
		t.Errorf("a default name no longer allowed: %d", got)
	}
	if got, _ := post(t, url+runtime.PathAudit, roots, issue(t, "portal-audit", ca, false), "", audit); got != http.StatusOK {
		t.Errorf("an allowed name of one's own: %d", got)
	}
}

// TestClientCAReloadedWhenItChanges: rotating the client CA file (as a
// ConfigMap update does: a new file renamed over the old) takes effect on
// the next request, without a restart; a file that does not parse keeps
// the last good CA.
func TestClientCAReloadedWhenItChanges(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	url, oldCA, roots, caFile := endpointCA(t, h, runtime.ServerOptions{})
	body := eventList(t)
	newCA := issue(t, "apiserver-client-ca-2", nil, true)
	byOld := issue(t, "kube-apiserver-kubelet-client", oldCA, false)
	byNew := issue(t, "kube-apiserver-kubelet-client", newCA, false)
	replace := func(data []byte) {
		t.Helper()
		tmp := filepath.Join(filepath.Dir(caFile), "ca.tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, caFile); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, cert *keyPair, want int) {
		t.Helper()
		if got, err := post(t, url+runtime.PathAudit, roots, cert, "", body); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", when, got, err, want)
		}
	}
	check("before the rotation, the new CA's certificate", byNew, http.StatusUnauthorized)
	check("before the rotation, the old CA's certificate", byOld, http.StatusOK)
	replace(pemOf(newCA.cert))
	check("after the rotation, the new CA's certificate", byNew, http.StatusOK)
	check("after the rotation, the old CA's certificate", byOld, http.StatusUnauthorized)
	replace([]byte("not a certificate"))
	check("after a broken file, the last good CA's certificate", byNew, http.StatusOK)
}

// TestServingCertificateReloaded: the running endpoint serves a renewed
// tls.crt and tls.key from --runtime-cert-dir without a restart.
func TestServingCertificateReloaded(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	dir := t.TempDir()
	write := func(kp *keyPair) {
		t.Helper()
		der, err := x509.MarshalPKCS8PrivateKey(kp.key)
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{
			"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), "tls.crt": pemOf(kp.cert),
		} {
			if err := os.WriteFile(filepath.Join(dir, name+".tmp"), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"tls.key", "tls.crt"} {
			if err := os.Rename(filepath.Join(dir, name+".tmp"), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	first, second := issue(t, "portal-1", nil, true), issue(t, "portal-2", nil, true)
	write(first)
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := runtime.NewServer(runtime.ServerOptions{Addr: addr, CertDir: dir, AuditToken: auditToken,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, h.src, h.metrics)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	served := func() string {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec // the test reads which certificate is served
		if err != nil {
			return ""
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	waitServed := func(want string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return served() == want, nil
		})
		if err != nil {
			t.Fatalf("the endpoint serves %q, want %q", served(), want)
		}
	}
	waitServed("portal-1")
	write(second)
	waitServed("portal-2")
}
