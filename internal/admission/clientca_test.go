package admission_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// replaceFile swaps path's content the way the kubelet updates a mounted
// ConfigMap or Secret: a new file renamed over the old one.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestWebhookClientCAReloads: when the --webhook-client-ca-file changes
// (the CA rotated in its ConfigMap), the running webhook refuses clients of
// the old CA and accepts those of the new one, without a restart; a file
// then broken keeps the last good CA in force and is logged.
func TestWebhookClientCAReloads(t *testing.T) {
	cluster(t)
	ca1, err := newTestCA("client-ca-1")
	if err != nil {
		t.Fatal(err)
	}
	// A later expiry than ca1's, which the expiry gauge must follow.
	ca2, err := newTestCAUntil("client-ca-2", time.Now().Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *testCA, name string) *tls.Certificate {
		c, _, _, err := ca.issueClient(name)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	old, cur, mallory := issue(ca1, apiServerClientName), issue(ca2, apiServerClientName), issue(ca2, "mallory")

	file := filepath.Join(t.TempDir(), "client-ca.crt")
	if err := os.WriteFile(file, ca1.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncWriter{}
	metrics := admission.NewClientCAMetrics()
	clk := clocktesting.NewFakeClock(time.Now())
	clientAuth, err := admission.ClientAuthFile(file, admission.ClientCAOptions{AllowedNames: []string{apiServerClientName},
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Metrics: metrics, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(exprlang.New())
	r, err := eng.Compile(&core.Rule{Name: "no-privileged", Enabled: true, Modes: []core.Mode{core.ModeAdmission},
		EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny, Match: core.Match{GVKs: []core.GVK{{Version: "v1", Kind: "Pod"}}},
		Expression: "container.securityContext.privileged == true", Message: "privileged"})
	if err != nil {
		t.Fatal(err)
	}
	eng.SetRules([]*engine.Rule{r})
	const name = "portal-client-ca-reload"
	p, err := startPortal(portalOptions{name: name, logs: &syncWriter{}, evaluator: eng, rules: eng,
		tls: []func(*tls.Config){clientAuth}, clientCert: old})
	// Its webhook configuration is on the shared API server, which has no
	// client certificate: left behind, it would fail the next tests' pods.
	t.Cleanup(func() {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.client.Delete(context.Background(), vwc); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.stop() })

	accepted := func(cert *tls.Certificate) bool {
		code, err := postReview(p, cert, review("reload", "CREATE", "team", false))
		return err == nil && code == http.StatusOK
	}
	if !accepted(old) {
		t.Fatal("a client of the CA in the file at start is refused")
	}
	if accepted(cur) {
		t.Fatal("a client of a CA not yet in the file is accepted")
	}
	expiry := func() time.Time { return time.Unix(int64(testutil.ToFloat64(metrics.Expiry)), 0) }
	reloads := func(result string) float64 { return testutil.ToFloat64(metrics.Reloads.WithLabelValues(result)) }
	if !expiry().Equal(ca1.cert.NotAfter.Truncate(time.Second)) {
		t.Errorf("expiry gauge %v, want the first CA's %v", expiry(), ca1.cert.NotAfter)
	}

	replaceFile(t, file, ca2.pem)
	// The file is read again once ClientCARecheck has passed on the
	// clock: no handshake before that sees the new CA.
	if !accepted(old) {
		t.Fatal("the client CA file was read again before ClientCARecheck passed")
	}
	clk.Step(admission.ClientCARecheck)
	eventually(t, "the client of the replaced CA refused", func() bool { return !accepted(old) })
	if !accepted(cur) {
		t.Fatal("a client of the new CA is refused")
	}
	// The allowed names still apply to the new CA's certificates.
	if accepted(mallory) {
		t.Fatal("a client of the new CA with a name not allowed is accepted")
	}
	if got := reloads(admission.ClientCAReloaded); got != 1 {
		t.Errorf("reloads{result=reloaded} = %v after one rotation, want 1", got)
	}
	if !expiry().Equal(ca2.cert.NotAfter.Truncate(time.Second)) {
		t.Errorf("expiry gauge %v after the rotation, want the new CA's %v", expiry(), ca2.cert.NotAfter)
	}

	// A broken file keeps the last good CA: nobody is locked out, nor let in.
	replaceFile(t, file, []byte("not a certificate"))
	clk.Step(admission.ClientCARecheck)
	// Handshakes are what re-read the file.
	eventually(t, "the broken file logged", func() bool {
		accepted(cur)
		return len(logs.lines("unusable", file)) > 0
	})
	if !accepted(cur) {
		t.Fatal("after the file broke, a client of the last good CA is refused")
	}
	if accepted(old) {
		t.Fatal("after the file broke, a client of the replaced CA is accepted")
	}
	if got := reloads(admission.ClientCAFailed); got != 1 {
		t.Errorf("reloads{result=failed} = %v after the file broke, want 1", got)
	}
	if got := reloads(admission.ClientCAReloaded); got != 1 {
		t.Errorf("reloads{result=reloaded} = %v after the file broke, want still 1", got)
	}
	if !expiry().Equal(ca2.cert.NotAfter.Truncate(time.Second)) {
		t.Errorf("expiry gauge %v after the file broke, want the CA in force's %v", expiry(), ca2.cert.NotAfter)
	}
}
