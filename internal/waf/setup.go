// Package waf assembles Portal's WAF rule layer (--waf): the RuleSet
// controllers and the rule set cache server. The packages below it do the
// work: ruleset (sandboxed Coraza compile), cache (store, HTTP server,
// client) and controller (compiler and status writer).
package waf

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/controller"
)

// Options configure the WAF rule layer. Start from DefaultOptions.
type Options struct {
	// CacheAddr is the cache server's listen address (--waf-cache-addr).
	CacheAddr string
	// CacheMaxAge, CacheMaxSize (bytes) and CacheGCInterval drive the cache
	// garbage collector (--cache-max-age, --cache-max-size,
	// --cache-gc-interval). The latest revision of a rule set is never
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
	// Compile bounds the RuleSet compiler (--waf-max-ruleset-bytes,
	// --waf-max-data-file-bytes, --waf-compile-timeout,
	// --waf-compile-concurrency, --waf-max-last-good-bytes).
	Compile controller.CompilerOptions
}

// DefaultOptions are the defaults of the flags.
func DefaultOptions() Options {
	return Options{
		CacheAddr:       cache.DefaultAddr,
		CacheMaxAge:     cache.DefaultMaxAge,
		CacheMaxSize:    cache.DefaultMaxSize,
		CacheGCInterval: cache.DefaultGCInterval,
		Compile:         controller.DefaultCompilerOptions(),
	}
}

// Layer is the running WAF rule layer.
type Layer struct {
	// Cache is this replica's rule set cache.
	Cache *cache.Cache
	// Server serves Cache; Server.Ready and Server.Addr tell when and where.
	Server *cache.Server
	// Compiler holds what was made of each RuleSet.
	Compiler *controller.Compiler
}

// Setup adds the WAF rule layer to mgr: field indexes, the RuleSet compiler
// (every replica), the RuleSet status writer (leader only) and the cache
// server (every replica). mgr's scheme must hold the waf.portal.io/v1alpha1
// types (wafv1alpha1.AddToScheme).
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
	c := cache.New(nil, cache.NewMetrics(reg))
	srv := cache.NewServer(c, cache.ServerOptions{
		Addr: opts.CacheAddr, MaxAge: opts.CacheMaxAge, MaxSize: opts.CacheMaxSize,
		GCInterval: opts.CacheGCInterval, Logger: log,
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
	if err := mgr.Add(srv); err != nil {
		return nil, err
	}
	return &Layer{Cache: c, Server: srv, Compiler: comp}, nil
}
