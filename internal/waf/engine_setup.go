package waf

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/engine"
)

// setupEngine adds the Engine controller, which attaches RuleSets to
// Gateways through a data plane that reads this layer's cache.
func setupEngine(mgr ctrl.Manager, opts Options, log *slog.Logger, reg prometheus.Registerer, recorder string) error {
	eo := opts.Engine
	eo.Namespace = opts.Namespace
	eo.CacheService = opts.CacheService
	if eo.CacheService == "" {
		eo.CacheService = DefaultCacheService
	}
	if eo.CachePort == 0 {
		eo.CachePort = cachePort(opts.CacheAddr)
	}
	eo.CABundle = opts.Certificates.CABundle
	eo.Logger = log.With("controller", "waf-engine")
	eo.Recorder = mgr.GetEventRecorder(recorder)
	eo.Metrics = engine.NewMetrics(reg)
	if eo.Clock == nil {
		eo.Clock = opts.Clock
	}
	r, err := engine.New(mgr, eo)
	if err != nil {
		return err
	}
	if err := r.SetupWithManager(context.Background(), mgr); err != nil {
		return fmt.Errorf("engine controller: %w", err)
	}
	return nil
}

// cachePort is the port of the cache's listen address, the default port
// when it names none (":0" in tests).
func cachePort(addr string) int32 {
	if _, p, err := net.SplitHostPort(addr); err == nil {
		if n, err := strconv.ParseInt(p, 10, 32); err == nil && n > 0 {
			return int32(n)
		}
	}
	_, p, _ := net.SplitHostPort(cache.DefaultAddr)
	n, _ := strconv.ParseInt(p, 10, 32)
	return int32(n)
}
