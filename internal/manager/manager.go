// Package manager assembles Portal's controller-runtime manager from the
// layers a configuration enables, so `portal run` (in a cluster) and
// `portal dev` (against a local control plane) start exactly the same thing.
package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway"
	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/exception"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/metricsauth"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/sink"
	"github.com/vilaca/portal/internal/waf"
)

// Config selects the layers and their settings. The zero value is not
// useful: start from Defaults.
type Config struct {
	// Namespace is Portal's own namespace: leader election, the webhook
	// certificate Secret, and always excluded from admission.
	Namespace string

	// RulesFolder, when set, loads rule files from this directory besides
	// the rule custom resources.
	RulesFolder string

	// MetricsAddr and HealthAddr are the listen addresses of /metrics and of
	// /healthz and /readyz; "0" disables a listener.
	MetricsAddr string
	HealthAddr  string
	// PprofAddr is the listen address of net/http/pprof's /debug/pprof/
	// (heap, goroutine and CPU profiles); empty or "0" serves none.
	PprofAddr string
	// MetricsSecure serves /metrics over HTTPS and only to clients whose
	// bearer token the API server authenticates (TokenReview) and allows
	// get on the /metrics non-resource URL (SubjectAccessReview), as
	// kubebuilder projects do. false serves plain HTTP to anyone who can
	// connect.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for the HTTPS metrics
	// server, reloaded when they change; empty means a self-signed
	// certificate generated at start (scrapers then skip verification or
	// pin nothing: the bearer token is what is checked).
	MetricsCertDir string

	// KubeAPIQPS and KubeAPIBurst bound Portal's requests to the API server
	// on the client side. QPS <= 0 (the default) sets no client-side limit,
	// as controller-runtime does: the API server's Priority and Fairness
	// governs. Burst 0 means twice QPS.
	KubeAPIQPS   float32
	KubeAPIBurst int

	// LeaderElection makes the writers (status, certificates, webhook
	// configuration) run on one replica at a time.
	LeaderElection   bool
	LeaderElectionID string
	// LeaderPod is this replica's pod in Portal's namespace, labelled
	// LeaderLabel while it leads, so a Service selecting the label reaches
	// the leader alone: the runtime endpoint, and the verdicts forwarded
	// by the other replicas. Empty labels nothing.
	LeaderPod string

	// RuleBudget bounds every rule evaluation (admission, audit): the
	// operations it may run and the bytes it may build.
	RuleBudget exprlang.Limits

	// AllowTenantKinds lists the rule.HighRateKinds PortalRules may match,
	// as Kind.group (--allow-tenant-kinds); by default they may match none.
	AllowTenantKinds []string

	// ExceptionNamespaces lists the namespaces (names or shell globs) whose
	// PortalExceptions Portal honours (--exception-namespaces); empty means
	// every namespace. PortalClusterExceptions always apply.
	ExceptionNamespaces []string
	// ExceptionMaxDuration, when positive, refuses a PortalException
	// without expires or expiring later than this after its creation
	// (--exception-max-duration). PortalClusterExceptions are not bound.
	ExceptionMaxDuration time.Duration
	// Clock is the one clock of the process: it decides when exceptions
	// expire, and every layer whose options take a clock (certificates,
	// actions' rate limits, runtime windows) gets it. nil is the real
	// clock; tests inject a fake one.
	Clock clock.WithTickerAndDelayedExecution

	// Admission, Audit and WAF switch the layers on and configure them.
	Admission AdmissionConfig
	Audit     AuditConfig
	// Sinks select and configure the outputs of the findings pipeline,
	// which every producer of findings (audit, network, runtime) shares;
	// their flags are the sink registry's (sink.BindFlags).
	Sinks sink.Options
	// Lookup configures cluster.* lookups in rules (admission and audit).
	Lookup LookupConfig
	// Actions runs the response actions.
	Actions ActionsConfig
	// Network runs the L6 NetworkPolicy analyser.
	Network NetworkConfig
	// Runtime evaluates runtime rules on audit events and Falco alerts.
	Runtime RuntimeConfig

	// WAF runs the L7 WAF rule pipeline and its cache server.
	WAF        bool
	WAFOptions waf.Options

	// APIGateway runs the L7 API exposure layer: APIGateway, APIRule and
	// RateLimit generating Istio configuration.
	APIGateway        bool
	APIGatewayOptions apigateway.Options

	// Logger receives every log line, as JSON in production.
	Logger *slog.Logger
	// OnReady, when set, is called once every enabled layer serves.
	OnReady func()
	// ShutdownDrain is how long Portal keeps serving after ctx ends,
	// closing each webhook connection after its response, before it
	// stops (see drainAfter). 0 stops at once.
	ShutdownDrain time.Duration
	// Registerer receives every layer's metrics. nil means
	// controller-runtime's metrics.Registry, which the metrics endpoint
	// serves; another registry lets two managers run in one process.
	Registerer prometheus.Registerer
}

// Defaults returns the configuration `portal run` starts from.
func Defaults() Config {
	return Config{
		Namespace:         "portal-system",
		MetricsAddr:       ":8443",
		MetricsSecure:     true,
		HealthAddr:        ":8081",
		LeaderElection:    true,
		LeaderElectionID:  "portal-leader",
		RuleBudget:        exprlang.DefaultLimits(),
		Admission:         defaultAdmission(),
		WAFOptions:        waf.DefaultOptions(),
		APIGatewayOptions: apigateway.DefaultOptions(),
		Audit:             defaultAudit(),
		Sinks:             sink.Defaults(),
		Actions:           defaultActions(),
		Network:           defaultNetwork(),
		Runtime:           defaultRuntime(),
		Lookup:            defaultLookup(),
		Logger:            slog.Default(),
	}
}

// clientRateLimit returns a copy of restCfg with Portal's client-side rate
// limit. A kubeconfig read by client-go carries QPS 0, which client-go turns
// into 5 requests per second: far too few for report writes and rule status
// under load, so Portal always sets the limit itself. A RateLimiter already
// in restCfg is kept.
func clientRateLimit(restCfg *rest.Config, qps float32, burst int) *rest.Config {
	c := rest.CopyConfig(restCfg)
	if c.RateLimiter != nil {
		return c
	}
	if qps <= 0 {
		c.QPS, c.Burst = -1, 0
		return c
	}
	if burst <= 0 {
		burst = max(1, int(2*qps))
	}
	c.QPS, c.Burst = qps, burst
	return c
}

// Scheme holds every API type Portal reads or writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, policyv1alpha1.AddToScheme, wafv1alpha1.AddToScheme, gatewayv1alpha1.AddToScheme,
		// The Istio kinds the API exposure layer writes.
		networkingv1.AddToScheme, networkingv1alpha3.AddToScheme, securityv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run starts the manager with the configured layers and blocks until ctx
// ends or a layer fails.
func Run(ctx context.Context, restCfg *rest.Config, cfg Config) error {
	ctx, draining, stopDrain := drainAfter(ctx, cfg.ShutdownDrain)
	defer stopDrain()
	log := cfg.Logger
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	if cfg.Clock == nil {
		// The one clock of the process: every option that takes a clock
		// gets this one.
		cfg.Clock = clock.RealClock{}
	}
	layers, err := enabledLayers(&cfg)
	if err != nil {
		return err
	}
	mgr, _, err := assemble(restCfg, &cfg, layers, draining)
	if err != nil {
		return err
	}
	log.Info("portal starting", "namespace", cfg.Namespace, "layers", layerNames(layers), "rulesFolder", cfg.RulesFolder)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// assemble builds the manager with layers in two phases: each provides what
// the others consume onto the board, then each sets up with what it asks
// the board for. cfg.Clock must be set.
func assemble(restCfg *rest.Config, cfg *Config, layers []Layer, draining <-chan struct{}) (ctrl.Manager, *Board, error) {
	restCfg = clientRateLimit(restCfg, cfg.KubeAPIQPS, cfg.KubeAPIBurst)
	board := newBoard()
	if err := provideLayers(layers, board); err != nil {
		return nil, nil, err
	}
	if err := provideFindings(board, cfg); err != nil {
		return nil, nil, fmt.Errorf("findings pipeline: %w", err)
	}
	mgr, err := newManager(restCfg, cfg, board)
	if err != nil {
		return nil, nil, err
	}
	reg := cfg.Registerer
	if reg == nil {
		reg = metrics.Registry
	}
	log := cfg.Logger
	// The shared cluster cache: audit reads from it, and it answers the
	// rules' cluster.* lookups.
	ccache, err := newClusterCache(mgr, cfg, reg)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster cache: %w", err)
	}
	lk, depIndex, err := newLookups(restCfg, ccache, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	eng := engine.New(exprlang.New(exprlang.WithLimits(cfg.RuleBudget)), engine.WithBinder(lk.binder), engine.WithClock(cfg.Clock))
	index := rule.NewIndex(eng)
	exceptions := newExceptions(mgr, eng, cfg, cfg.Clock, reg, log)
	// loaded is closed once every rule source has been read, for the
	// layers that must not answer before.
	loaded := make(chan struct{})
	if err := lk.start(mgr, restCfg, eng, depIndex, cfg, reg, log); err != nil {
		return nil, nil, err
	}
	index.OnChange(lk.watcher.Notify)
	series := rule.NewSeries(eng.Rules)
	index.OnChange(series.Sweep)
	deps := Deps{
		Manager: mgr, Board: board, Clock: cfg.Clock, Engine: eng, Rules: index, RulesLoaded: loaded, Cache: ccache,
		Registerer: reg, Logger: log, Namespace: cfg.Namespace, Lookups: lk.watcher,
		Draining: draining, RuleSeries: series, Exceptions: exceptions,
	}
	board.bind(deps)
	if err := board.buildAll(); err != nil {
		return nil, nil, err
	}
	if err := setupLayers(layers, deps); err != nil {
		return nil, nil, err
	}
	if err := actionsStatus(cfg, deps); err != nil {
		return nil, nil, err
	}
	if err := labelLeader(cfg, deps); err != nil {
		return nil, nil, err
	}
	if err := setupRuleLoading(mgr, cfg, deps, lk, loaded); err != nil {
		return nil, nil, err
	}
	return mgr, board, nil
}

// newManager creates the manager with the options the layers changed on
// the board (admission's webhook server).
func newManager(restCfg *rest.Config, cfg *Config, board *Board) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	opts := managerOptions(cfg, scheme)
	changes, err := All[managerOption](board)
	if err != nil {
		return nil, err
	}
	for _, change := range changes {
		change(&opts)
	}
	mgr, err := ctrl.NewManager(restCfg, opts)
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	return mgr, nil
}

// managerOptions are the controller-runtime options every layer starts from.
func managerOptions(cfg *Config, scheme *runtime.Scheme) ctrl.Options {
	opts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsOptions(cfg),
		HealthProbeBindAddress:        cfg.HealthAddr,
		PprofBindAddress:              cfg.PprofAddr,
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionID:              cfg.LeaderElectionID,
		LeaderElectionNamespace:       cfg.Namespace,
		LeaderElectionReleaseOnCancel: true,
		// Shorter than controller-runtime's 15s/10s so a crashed leader is
		// replaced within 15 seconds.
		LeaseDuration:           ptrDuration(10 * time.Second),
		RenewDeadline:           ptrDuration(7 * time.Second),
		RetryPeriod:             ptrDuration(2 * time.Second),
		GracefulShutdownTimeout: ptrDuration(10 * time.Second),
		// No reconciler reads managed fields, often the largest part of a
		// small object's metadata; writes are server-side applies, and an
		// update without them keeps the stored ones.
		Cache: cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		// A mapper that can forget what it learnt, when a CRD is deleted
		// (lookup.go).
		MapperProvider: func(c *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
			return newForgettingMapper(c, hc)
		},
	}
	if cfg.Registerer != nil {
		// controller-runtime refuses a second controller of the same name
		// in a process, because its own metrics would collide; a manager
		// with its own registry is the second one by design.
		opts.Controller.SkipNameValidation = ptr.To(true)
	}
	return opts
}

// setupRuleLoading adds what loads the rules (the CR loader, the rules
// folder) and reports on them (rule status, lookup status, budget), and the
// health and readiness checks: ready only once every source was read.
func setupRuleLoading(mgr ctrl.Manager, cfg *Config, d Deps, lk *lookups, loaded chan struct{}) error {
	eng, index, reg, log := d.Engine, d.Rules, d.Registerer, d.Logger
	ruleMetrics := rule.NewMetrics(reg)
	loader := rule.NewCRLoader(mgr.GetCache(), eng, index, log, ruleMetrics)
	tenantKinds, err := rule.ParseTenantKinds(cfg.AllowTenantKinds)
	if err != nil {
		return fmt.Errorf("allowed tenant kinds: %w", err)
	}
	loader.AllowTenantKinds(tenantKinds)
	lk.rules, lk.index = loader, index
	if err := loader.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := rule.NewStatusReconciler(mgr.GetClient(), loader, mgr.GetEventRecorder("portal")).SetupWithManager(mgr); err != nil {
		return err
	}
	lk.status = rule.NewLookupStatus(mgr.GetClient(), lookupSource{lk.watcher}, loader, log, cfg.Clock)
	if err := mgr.Add(lk.status); err != nil {
		return err
	}
	budget := rule.NewBudgetStatus(mgr.GetClient(), loader, rule.BudgetOptions{Logger: log, Registerer: reg, Clock: cfg.Clock})
	if err := mgr.Add(budget); err != nil {
		return err
	}
	eng.ReportBudget(budget)
	d.RuleSeries.Track(budget.Exceeded().MetricVec)
	index.OnChange(func() { budget.RulesChanged(eng.Rules()) })
	rulesLoaded := []<-chan struct{}{}
	if cfg.RulesFolder != "" {
		folder := rule.NewFolder(cfg.RulesFolder, eng, index, log, ruleMetrics)
		if err := mgr.Add(folder); err != nil {
			return err
		}
		rulesLoaded = append(rulesLoaded, folder.Loaded())
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := setupExceptions(mgr, d); err != nil {
		return err
	}
	ready := &readiness{mgr: mgr, crs: loader, exceptions: d.Exceptions, folders: rulesLoaded, loaded: loaded, onReady: cfg.OnReady}
	if err := mgr.Add(ready); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("rules", ready.check); err != nil {
		return err
	}
	return nil
}

// readiness turns ready once the rule caches have synced and every rules
// folder has been read once, so no replica answers admission with a partial
// rule set.
type readiness struct {
	mgr        ctrl.Manager
	crs        *rule.CRLoader
	exceptions *exception.Loader
	folders    []<-chan struct{}
	loaded     chan struct{}
	ready      atomic.Bool
	onReady    func()
}

// Start implements manager.Runnable; it runs on every replica.
func (r *readiness) Start(ctx context.Context) error {
	if !r.mgr.GetCache().WaitForCacheSync(ctx) {
		return nil
	}
	if err := r.crs.WaitLoaded(ctx); err != nil {
		return nil
	}
	// An exception missing at start would refuse what it admits.
	if err := r.exceptions.WaitLoaded(ctx); err != nil {
		return nil
	}
	for _, ch := range r.folders {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
	r.ready.Store(true)
	close(r.loaded)
	if r.onReady != nil {
		r.onReady()
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (r *readiness) NeedLeaderElection() bool { return false }

func (r *readiness) check(*http.Request) error {
	if !r.ready.Load() {
		return errors.New("rules not loaded yet")
	}
	return nil
}

// metricsOptions configures the metrics server: HTTPS with Kubernetes
// authentication and authorization unless plain HTTP was asked for.
func metricsOptions(cfg *Config) metricsserver.Options {
	o := metricsserver.Options{BindAddress: cfg.MetricsAddr}
	if !cfg.MetricsSecure {
		return o
	}
	o.SecureServing = true
	o.FilterProvider = metricsauth.FilterProvider(metricsauth.Options{Clock: cfg.Clock})
	o.CertDir, o.CertName, o.KeyName = cfg.MetricsCertDir, "tls.crt", "tls.key"
	o.TLSOpts = []func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = tls.VersionTLS12
		// HTTP/2 off, as on the webhook server (CVE-2023-44487).
		c.NextProtos = []string{"http/1.1"}
	}}
	return o
}

func ptrDuration(d time.Duration) *time.Duration { return &d }

// newClusterCache builds the manager's one cluster cache and adds it to the
// manager. It watches nothing until a layer acquires a resource, so a
// configuration without audit, lookups or network starts no informer. Its
// resync check runs at least as often as audit's resync wants.
func newClusterCache(mgr ctrl.Manager, cfg *Config, reg prometheus.Registerer) (*clustercache.Cache, error) {
	resync := clustercache.DefaultResyncPeriod
	if cfg.Audit.Enabled && cfg.Audit.ResyncPeriod > 0 {
		resync = min(resync, cfg.Audit.ResyncPeriod)
	}
	cc, err := clustercache.New(mgr.GetConfig(), mgr.GetRESTMapper(), clustercache.Options{ResyncPeriod: resync, Logger: cfg.Logger, Registerer: reg})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(cc); err != nil {
		return nil, err
	}
	return cc, nil
}
