package manager

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/apigateway"
	"github.com/vilaca/portal/internal/certs"
	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/waf"
)

// Layer is one room of Portal that a configuration switches on. Run builds
// the shared dependencies once and hands them to every enabled layer, in
// order; layers meet only through them, never each other.
type Layer interface {
	// Name is the layer's name in logs and errors.
	Name() string
	// Setup adds the layer's controllers, webhooks and runnables to the
	// manager. It runs before the manager starts.
	Setup(d Deps) error
}

// optionsConfigurer is a layer that must shape the manager's options
// before the manager exists: admission brings its webhook server.
type optionsConfigurer interface {
	ConfigureOptions(opts *ctrl.Options) error
}

// Deps are what the layers share.
type Deps struct {
	Manager ctrl.Manager
	// Engine evaluates the rules every source loads.
	Engine *engine.Engine
	// Rules tells subscribers when the rule set changes (Rules.OnChange);
	// the engine already holds the new set when they are called.
	Rules *rule.Index
	// RulesLoaded is closed once every rule source has been read.
	RulesLoaded <-chan struct{}
	// Cache is the shared cluster cache: layers acquire the resources they
	// read or watch from it, so two layers never watch one twice.
	Cache *clustercache.Cache
	// Findings is the findings pipeline every producer of findings
	// publishes into under its own name (Findings.Register); it runs the
	// sinks once. nil when no enabled layer produces findings.
	Findings *findings.Pipeline
	// Verdicts receives admission's verdicts of rules with actions, without
	// blocking; nil when the actions layer is off.
	Verdicts core.VerdictSink
	// Registerer receives the layers' metrics.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Namespace is Portal's own namespace.
	Namespace string
	// Draining is closed once Portal has been asked to stop and serves
	// Config.ShutdownDrain more before it does.
	Draining <-chan struct{}
	// Lookups re-evaluates what read an object when it changes; the audit
	// layer gives it its re-queue hook.
	Lookups *lookup.Watcher
}

// enabledLayers returns the layers cfg switches on, in the order they are
// set up.
func enabledLayers(cfg *Config) ([]Layer, error) {
	var ls []Layer
	if cfg.Admission.Enabled {
		a, err := newAdmission(cfg)
		if err != nil {
			return nil, err
		}
		ls = append(ls, a)
	}
	if cfg.Audit.Enabled {
		ls = append(ls, &auditLayer{cfg: cfg.Audit})
	}
	if cfg.Network.Enabled {
		ls = append(ls, &networkLayer{cfg: cfg.Network})
	}
	if cfg.WAF {
		ls = append(ls, &wafLayer{opts: cfg.WAFOptions})
	}
	if cfg.APIGateway {
		ls = append(ls, &apiGatewayLayer{opts: cfg.APIGatewayOptions})
	}
	if cfg.Actions.Enabled {
		ls = append(ls, &actionsLayer{cfg: cfg.Actions, alertsSink: cfg.Audit.Sinks.AlertmanagerURL != "", admission: cfg.Admission.Enabled})
	}
	return ls, nil
}

// wafLayer is the L7 WAF rule pipeline and its rule set cache.
type wafLayer struct{ opts waf.Options }

func (*wafLayer) Name() string { return "waf" }

func (l *wafLayer) Setup(d Deps) error {
	o := l.opts
	o.Logger = d.Logger
	o.Namespace = d.Namespace
	o.Registerer = d.Registerer
	service, secret := o.CacheService, o.CacheCertSecret
	if service == "" {
		service = waf.DefaultCacheService
	}
	// Never certs' default, which is the webhook's Secret.
	if secret == "" {
		secret = waf.DefaultCacheCertSecret
	}
	cc, err := certs.Setup(d.Manager, certs.CacheOptions(d.Namespace, service, secret, d.Logger, d.Registerer), "waf-cache-certificate")
	if err != nil {
		return fmt.Errorf("cache certificate: %w", err)
	}
	o.Certificates = cc
	_, err = waf.Setup(d.Manager, o)
	return err
}

// setupLayers hands the shared dependencies to each layer.
func setupLayers(ls []Layer, d Deps) error {
	for _, l := range ls {
		if err := l.Setup(d); err != nil {
			return fmt.Errorf("%s layer: %w", l.Name(), err)
		}
	}
	return nil
}

// layerNames lists the names of ls, for the start-up log line.
func layerNames(ls []Layer) []string {
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Name()
	}
	return names
}

// apiGatewayLayer is the L7 API exposure layer (APIGateway, APIRule,
// RateLimit -> Istio configuration).
type apiGatewayLayer struct{ opts apigateway.Options }

func (*apiGatewayLayer) Name() string { return "apigateway" }

func (l *apiGatewayLayer) Setup(d Deps) error {
	o := l.opts
	o.Logger = d.Logger
	return apigateway.Setup(d.Manager, o)
}
