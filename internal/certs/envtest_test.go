package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/pki"
	"github.com/vilaca/portal/internal/testlog"
)

// One control plane serves every test of the package; it starts on first
// use, so the unit tests and fuzz targets do not pay for it.
var (
	envOnce sync.Once
	env     struct {
		cfg    *rest.Config
		client client.Client
		scheme *runtime.Scheme
		err    error
		stop   func() error
	}
)

func TestMain(m *testing.M) {
	code := m.Run()
	if env.stop != nil {
		if err := env.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func cluster(t *testing.T) {
	t.Helper()
	envOnce.Do(func() {
		cl, err := devcluster.Start(context.Background(), devcluster.Options{CRDDirectoryPaths: []string{}})
		if err != nil {
			env.err = err
			return
		}
		env.stop, env.cfg = cl.Stop, cl.Config
		env.scheme = runtime.NewScheme()
		for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme} {
			if env.err = add(env.scheme); env.err != nil {
				return
			}
		}
		env.client, env.err = client.New(cl.Config, client.Options{Scheme: env.scheme})
	})
	if env.err != nil {
		t.Fatal(env.err)
	}
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	cluster(t)
	ns := "certs-" + rand.String(6)
	if err := env.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// replica is one running Portal replica: its controller, metrics, manager.
type replica struct {
	c       *Controller
	metrics *Metrics
	mgr     ctrl.Manager
}

// start runs a controller in a manager of its own until the test ends.
// leaseID, when set, turns on leader election with that lease.
func start(t *testing.T, opts Options, leaseID string) *replica {
	t.Helper()
	r := &replica{metrics: NewMetrics(nil)}
	opts.Metrics, opts.Log = r.metrics, testLogger(t)
	var err error
	if r.c, err = New(opts); err != nil {
		t.Fatal(err)
	}
	mo := ctrl.Options{
		Scheme:                 env.scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Every test runs its own manager with the same controller names.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if leaseID != "" {
		mo.LeaderElection, mo.LeaderElectionID, mo.LeaderElectionNamespace = true, leaseID, opts.Namespace
		mo.LeaderElectionReleaseOnCancel = true
	}
	if r.mgr, err = ctrl.NewManager(env.cfg, mo); err != nil {
		t.Fatal(err)
	}
	if err := r.c.SetupWithManager(r.mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return r
}

// testLogger keeps the controller's log and prints it when the test fails.
func testLogger(t *testing.T) *slog.Logger {
	w := &testlog.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller log:\n%s", w.String())
		}
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// eventually polls cond until it holds or 30 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// never polls for d and fails as soon as cond holds.
func never(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, d, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err == nil {
		t.Fatalf("%s happened", what)
	}
}

func getSecret(t *testing.T, ns string) (*corev1.Secret, bool) {
	t.Helper()
	sec := &corev1.Secret{}
	err := env.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: DefaultSecretName}, sec)
	if client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	return sec, err == nil
}

// secretBundle reads the Secret; nil when it is missing or not servable.
func secretBundle(t *testing.T, ns string) *pki.Bundle {
	t.Helper()
	sec, ok := getSecret(t, ns)
	if !ok {
		return nil
	}
	b, err := pki.Parse(sec.Data)
	if err != nil {
		return nil
	}
	return b
}

// served is the leaf r serves now, or nil.
func (r *replica) served() *x509.Certificate {
	cert, err := r.c.GetCertificate(nil)
	if err != nil {
		return nil
	}
	return cert.Leaf
}

// writeSecret creates or replaces the Secret as another writer would.
func writeSecret(t *testing.T, ns string, typ corev1.SecretType, data map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	sec, ok := getSecret(t, ns)
	if !ok {
		sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: DefaultSecretName, Namespace: ns}, Type: typ, Data: data}
		if err := env.client.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
		return
	}
	devtest.Update(t, env.client, sec, func() { sec.Data = data })
}

// issue makes Secret data with p at now, for tests that forge a state.
func issue(t *testing.T, p pki.Policy, from *pki.Bundle, pl pki.Plan) map[string][]byte {
	t.Helper()
	data, err := p.Issue(time.Now(), from, pl)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func hasEvent(t *testing.T, ns, name, reason string) bool {
	t.Helper()
	var list eventsv1.EventList
	if err := env.client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			return true
		}
	}
	return false
}

// webhookServer serves an allow-all validating webhook over TLS with c's
// certificate, as Portal's admission server will, and counts the calls.
func webhookServer(t *testing.T, c *Controller) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	calls := &atomic.Int64{}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		// Handshakes fail until the certificate is loaded; that is expected.
		ErrorLog: log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var review admissionv1.AdmissionReview
			if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
				http.Error(w, "bad AdmissionReview", http.StatusBadRequest)
				return
			}
			calls.Add(1)
			review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
			review.Request = nil
			_ = json.NewEncoder(w).Encode(&review)
		}),
	}
	srv.TLSConfig = &tls.Config{}
	c.ConfigureTLS(srv.TLSConfig)
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("webhook server: %v", err)
		}
	})
	return "https://" + ln.Addr().String() + "/validate", calls
}

func (m *Metrics) renewals() float64 { return testutil.ToFloat64(m.Renewals) }

func metaName(ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: DefaultSecretName, Namespace: ns}
}
