package admission_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/freeport"
	"github.com/vilaca/portal/internal/rule"
)

// portalNamespace is Portal's own namespace in these tests.
const portalNamespace = "portal-system"

// The control plane and a running Portal (rule loader, engine, webhook
// server, webhook configuration) are shared by the tests of this package and
// started on first use, so tests that need no API server do not pay for one.
var (
	envOnce sync.Once
	env     struct {
		cfg     *rest.Config
		scheme  *runtime.Scheme
		client  client.Client
		engine  *engine.Engine
		cache   cache.Cache
		portal  *portal
		logs    *syncWriter
		cert    *servingCert
		err     error
		cluster *devcluster.Cluster
	}
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	code := m.Run()
	var errs []error
	if env.portal != nil {
		errs = append(errs, env.portal.stop())
	}
	if env.cluster != nil {
		errs = append(errs, env.cluster.Stop())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
		code = 1
	}
	os.Exit(code)
}

func cluster(t *testing.T) {
	t.Helper()
	envOnce.Do(func() { env.err = startEnv() })
	if env.err != nil {
		t.Fatal(env.err)
	}
}

func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, policyv1alpha1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func startEnv() error {
	cl, err := devcluster.Start(context.Background(), devcluster.Options{})
	if err != nil {
		return err
	}
	env.cluster, env.cfg = cl, cl.Config
	if env.scheme, err = newScheme(); err != nil {
		return err
	}
	if env.client, err = client.New(env.cfg, client.Options{Scheme: env.scheme}); err != nil {
		return err
	}
	if env.cert, err = newServingCert(); err != nil {
		return err
	}
	if err := env.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: portalNamespace}}); err != nil {
		return err
	}
	env.engine = engine.New(exprlang.New())
	env.logs = &syncWriter{}
	env.portal, err = startPortal(portalOptions{
		name: admission.ConfigName, logs: env.logs, evaluator: env.engine, rules: env.engine,
		// Short, so TestStalledBodyIsCutOff need not wait the default 10s.
		bodyTimeout: 2 * time.Second,
		setup: func(mgr manager.Manager, cm *admission.ConfigManager) error {
			index := rule.NewIndex(env.engine)
			index.OnChange(cm.Notify)
			log := slog.New(slog.NewJSONHandler(env.logs, nil))
			return rule.NewCRLoader(mgr.GetCache(), env.engine, index, log, rule.NewMetrics(nil)).SetupWithManager(mgr)
		},
	})
	if err != nil {
		return err
	}
	env.cache = env.portal.mgr.GetCache()
	return nil
}

// portal is one running Portal admission layer: a manager with the webhook
// server, the webhook and the configuration manager.
type portal struct {
	mgr      manager.Manager
	webhook  *admission.Webhook
	config   *admission.ConfigManager
	registry *prometheus.Registry
	port     int
	// healthPort serves the manager's /healthz and /readyz, with the
	// webhook's readiness check registered as in production.
	healthPort int
	stop       func() error
}

type portalOptions struct {
	name      string // of the ValidatingWebhookConfiguration
	logs      *syncWriter
	evaluator admission.Evaluator
	rules     admission.GVKSource
	// setup adds more to the manager (the rule loader).
	setup func(manager.Manager, *admission.ConfigManager) error
	// cfg is the API server to run against; nil for the shared one.
	cfg *rest.Config
	// tls is added to the webhook server's TLS options; clientCert is what
	// the test presents when it checks the server is up.
	tls        []func(*tls.Config)
	clientCert *tls.Certificate
	// bodyTimeout is the webhook's BodyReadTimeout; 0 for its default.
	bodyTimeout time.Duration
	// maxConcurrent is the webhook's MaxConcurrentEvaluations; 0 for its
	// default.
	maxConcurrent int
}

// startPortal starts a manager serving the webhook over TLS on a free port
// of 127.0.0.1 and waits until it serves, its rules have loaded and the
// webhook configuration exists.
func startPortal(o portalOptions) (*portal, error) {
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		return nil, err
	}
	healthPort, err := freeport.Pick("127.0.0.1")
	if err != nil {
		return nil, err
	}
	cfg := o.cfg
	if cfg == nil {
		cfg = env.cfg
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 env.scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: fmt.Sprintf("127.0.0.1:%d", healthPort),
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: "127.0.0.1", Port: port, TLSOpts: append(admission.TLSOptions(env.cert.GetCertificate), o.tls...),
		}),
	})
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewJSONHandler(o.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	loaded := make(chan struct{})
	p := &portal{mgr: mgr, registry: prometheus.NewRegistry(), port: port, healthPort: healthPort}
	p.webhook, err = admission.New(admission.Options{
		Evaluator: o.evaluator, Namespaces: mgr.GetCache(), Logger: log, Registerer: p.registry, RulesLoaded: loaded,
		BodyReadTimeout: o.bodyTimeout, MaxConcurrentEvaluations: o.maxConcurrent,
	})
	if err != nil {
		return nil, err
	}
	mgr.GetWebhookServer().Register(admission.Path, p.webhook)
	if err := mgr.AddReadyzCheck("admission", p.webhook.ReadyCheck()); err != nil {
		return nil, err
	}
	p.config, err = admission.NewConfigManager(admission.ConfigOptions{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Mapper: mgr.GetRESTMapper(), Rules: o.rules, Name: o.name,
		Namespace: portalNamespace, URL: admission.LocalURL(port), CABundle: env.cert.CABundle,
		RulesLoaded: loaded, Logger: log, RetryInterval: 200 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(p.config); err != nil {
		return nil, err
	}
	// The rules count as loaded once the informer caches have synced.
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			close(loaded)
		}
		return nil
	}))
	if err != nil {
		return nil, err
	}
	if o.setup != nil {
		if err := o.setup(mgr, p.config); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	var stopErr error
	p.stop = func() error {
		once.Do(func() { cancel(); stopErr = <-done })
		return stopErr
	}
	if err := p.waitServing(o.clientCert); err != nil {
		return nil, errors.Join(err, p.stop())
	}
	return p, nil
}

// waitServing waits for the TLS listener, the rules and the webhook
// configuration.
func (p *portal) waitServing(clientCert *tls.Certificate) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := &tls.Config{RootCAs: env.cert.pool}
	if clientCert != nil {
		tc.Certificates = []tls.Certificate{*clientCert}
	}
	return wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.port), tc)
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		if p.webhook.ReadyCheck()(nil) != nil {
			return false, nil
		}
		return true, nil
	})
}

// readyz GETs the manager's /readyz and returns the HTTP status code.
func (p *portal) readyz() (int, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", p.healthPort))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// syncWriter collects log output written from other goroutines.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines returns the log lines holding every one of subs.
func (s *syncWriter) lines(subs ...string) []string {
	var out []string
	for _, l := range strings.Split(s.String(), "\n") {
		ok := l != ""
		for _, sub := range subs {
			ok = ok && strings.Contains(l, sub)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// warnings records the warnings the API server returns to a client.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// take returns the warnings seen since the last take.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// warningClient is a client whose warnings the test can read.
func warningClient(t *testing.T) (client.Client, *warnings) {
	t.Helper()
	w := &warnings{}
	cfg := rest.CopyConfig(env.cfg)
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: env.scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c, w
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, 20*time.Second, what, cond)
}

// eventuallyWithin is eventually with deadline d.
func eventuallyWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, d, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// namespace creates a namespace for one test and deletes it afterwards.
func namespace(t *testing.T, name string, annotations map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	if err := env.client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), ns) })
}
