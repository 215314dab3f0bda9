// Package waf assembles Portal's WAF rule layer (--waf): the RuleSet
// controllers and the rule set cache server. The packages below it do the
// work: ruleset (sandboxed Coraza compile), cache (store, HTTP server,
// client) and controller (compiler and status writer).
package waf

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/binding"
	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/controller"
	"github.com/vilaca/portal/internal/waf/engine"
)

// Defaults of the cache server's identity.
const (
	DefaultNamespace       = "portal-system"
	DefaultCacheService    = "portal-waf-cache"
	DefaultCacheCertSecret = "portal-waf-cache-cert"
)

// Options configure the WAF rule layer. Start from DefaultOptions.
type Options struct {
	// Namespace is Portal's own namespace, where the cache's certificate
	// Secret lives (DefaultNamespace in DefaultOptions; portal run sets
	// its --namespace). Required.
	Namespace string
	// CacheAddr is the cache server's listen address (--waf-cache-addr).
	CacheAddr string
	// CacheService is the Service data planes reach the cache by
	// (--waf-cache-service): its DNS names, and 127.0.0.1, go into the
	// cache's serving certificate.
	CacheService string
	// CacheCertSecret is the Secret in Namespace that holds the cache's
	// CA and serving certificate (--waf-cache-cert-secret); Portal issues
	// and renews it as it does the webhook's.
	CacheCertSecret string
	// CacheMaxConcurrent bounds the requests the cache answers at once
	// (--waf-cache-max-concurrent).
	CacheMaxConcurrent int
	// CacheMaxAge, CacheMaxSize (bytes) and CacheGCInterval drive the cache
	// garbage collector (--waf-cache-max-age, --waf-cache-max-size,
	// --waf-cache-gc-interval). The latest revision of a rule set is never
	// evicted.
	CacheMaxAge     time.Duration
	CacheMaxSize    int64
	CacheGCInterval time.Duration
	// Logger receives the layer's logs (slog.Default() when nil).
	Logger *slog.Logger
	// Registerer receives the layer's metrics (controller-runtime's registry,
	// served on the manager's metrics endpoint, when nil).
	Registerer prometheus.Registerer
	// EventRecorderName names the recorder of RuleSet events ("portal" when
	// empty).
	EventRecorderName string
	// Clock decides when a bundle that could not be had is fetched again
	// and, unless Engine.Clock is set, when Engine tokens are renewed; nil:
	// the real clock.
	Clock clock.PassiveClock
	// Certificates serves the cache's TLS certificate; required. The
	// manager gives it one from internal/certs (certs.CacheOptions with
	// CacheService and CacheCertSecret: its own CA and Secret, renewed and
	// rotated like the webhook's, loaded without a restart).
	Certificates CertificateSource
	// Compile bounds the RuleSet compiler (--waf-max-ruleset-bytes,
	// --waf-max-data-file-bytes, --waf-compile-timeout,
	// --waf-compile-concurrency, --waf-max-last-good-bytes).
	Compile controller.CompilerOptions
	// Bundle configures WAF bundles in S3-compatible storage (the
	// --bundle-* flags); Bundle.URL "" turns them off.
	Bundle bundle.SetupOptions
	// Engine configures the Engine controller (--waf-wasm-image,
	// --waf-proxy-image, --operator-name, --waf-engine-token-expiration);
	// Setup fills in the cache's namespace, Service, port and CA.
	Engine engine.Options
}

// DefaultOptions are the defaults of the flags.
func DefaultOptions() Options {
	return Options{
		Namespace:          DefaultNamespace,
		CacheAddr:          cache.DefaultAddr,
		CacheService:       DefaultCacheService,
		CacheCertSecret:    DefaultCacheCertSecret,
		CacheMaxConcurrent: cache.DefaultMaxConcurrent,
		CacheMaxAge:        cache.DefaultMaxAge,
		CacheMaxSize:       cache.DefaultMaxSize,
		CacheGCInterval:    cache.DefaultGCInterval,
		Compile:            controller.DefaultCompilerOptions(),
		Bundle:             bundle.DefaultSetupOptions(),
		Engine:             engine.Options{TokenExpiration: engine.DefaultTokenExpiration},
	}
}

// CertificateSource is what the cache server needs of a certificate
// controller: the certificate to serve and the CA data planes must trust.
type CertificateSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
	CABundle() []byte
}

// Layer is the running WAF rule layer.
type Layer struct {
	// Cache is this replica's rule set cache.
	Cache *cache.Cache
	// Server serves Cache; Server.Ready and Server.Addr tell when and where.
	Server *cache.Server
	// Compiler holds what was made of each RuleSet.
	Compiler *controller.Compiler
	// Certs serves the cache's certificate; Certs.CABundle is what data
	// planes must trust (--ca-file of portal waf-proxy).
	Certs CertificateSource
	// Binding attaches rule sets to Gateway API routes; nil when the
	// cluster does not serve the Gateway API.
	Binding *binding.Controller
	// Bundles fetches WAF bundles from S3-compatible storage for
	// WAFGatewayBindingPolicy spec.bundle; nil without --bundle-storage-url.
	// bundle.Install puts what it returns into Cache.
	Bundles *bundle.Fetcher
}

// Setup adds the WAF rule layer to mgr: field indexes, the RuleSet compiler
// (every replica), the RuleSet status writer (leader only), the cache's
// certificate controller and the cache server (every replica), which serves
// TLS and checks every caller's ServiceAccount token with the API server.
// mgr's scheme must hold the waf.portal.io/v1alpha1 types
// (wafv1alpha1.AddToScheme).
func Setup(mgr ctrl.Manager, opts Options) (*Layer, error) {
	if !mgr.GetScheme().IsVersionRegistered(wafv1alpha1.GroupVersion) {
		return nil, errors.New("waf: the manager's scheme lacks waf.portal.io/v1alpha1 (add wafv1alpha1.AddToScheme)")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("layer", "waf")
	reg := opts.Registerer
	if reg == nil {
		reg = metrics.Registry
	}
	name := opts.EventRecorderName
	if name == "" {
		name = "portal"
	}
	if opts.Namespace == "" {
		return nil, errors.New("waf: Options.Namespace (Portal's namespace, for the cache certificate) is required")
	}
	if opts.Certificates == nil {
		return nil, errors.New("waf: Options.Certificates (the cache's certificate) is required")
	}
	c := cache.New(nil, cache.NewMetrics(reg))
	kc, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("waf: review client: %w", err)
	}
	srv := cache.NewServer(c, cache.ServerOptions{
		Addr: opts.CacheAddr, MaxAge: opts.CacheMaxAge, MaxSize: opts.CacheMaxSize,
		GCInterval: opts.CacheGCInterval, Logger: log,
		Authorizer: cache.NewKubeAuthorizer(kc.AuthenticationV1().TokenReviews(), kc.AuthorizationV1().SubjectAccessReviews(),
			0, c.Metrics()),
		GetCertificate: opts.Certificates.GetCertificate,
		MaxConcurrent:  opts.CacheMaxConcurrent,
	}, c.Metrics())
	if err := controller.SetupIndexes(context.Background(), mgr); err != nil {
		return nil, err
	}
	comp := controller.NewCompiler(mgr.GetCache(), c, log, controller.NewMetrics(reg), opts.Compile)
	if err := comp.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := controller.NewStatusWriter(mgr.GetClient(), comp, mgr.GetEventRecorder(name)).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := controller.NewUsageWriter(mgr.GetClient()).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := setupEngine(mgr, opts, log, reg, name); err != nil {
		return nil, err
	}
	if err := mgr.Add(srv); err != nil {
		return nil, err
	}
	bopts := opts.Bundle
	bopts.MaxDataFileBytes = opts.Compile.MaxDataFileBytes
	bundles, err := bundle.Setup(mgr, bopts, opts.Namespace, c, reg, log)
	if err != nil {
		return nil, fmt.Errorf("waf: %w", err)
	}
	bind, err := setupBinding(mgr, c, bundleSource(bundles, c, opts.Clock, log), log, reg)
	if err != nil {
		return nil, err
	}
	l := &Layer{Cache: c, Server: srv, Compiler: comp, Certs: opts.Certificates, Binding: bind}
	if bundles != nil {
		l.Bundles = bundles.Fetcher
	}
	return l, nil
}
