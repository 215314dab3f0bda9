package manager

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/exception"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/rule"
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
	// RuleSeries prunes the series of per-rule metrics whose rule is gone;
	// a layer with such metrics tracks them here.
	RuleSeries *rule.Series
	// Lookups re-evaluates what read an object when it changes; the audit
	// layer gives it its re-queue hook.
	Lookups *lookup.Watcher
	// Exceptions loads the exceptions into the engine; a layer that keeps
	// results of past evaluations (audit) subscribes to its changes.
	Exceptions *exception.Loader
}

// enabledLayers returns the layers cfg switches on, in the order they are
// set up.
func enabledLayers(cfg *Config) ([]Layer, error) {
	var ls []Layer
	for _, r := range registry() {
		l, err := r.fromConfig(cfg)
		if err != nil {
			return nil, err
		}
		if l != nil {
			ls = append(ls, l)
		}
	}
	return ls, nil
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

// EnabledLayerNames lists the layers cfg switches on, in set-up order, for
// help texts and the start-up log; a layer whose configuration is invalid
// is left out (CheckFlags reports it).
func EnabledLayerNames(cfg *Config) []string {
	var names []string
	for _, r := range registry() {
		if l, err := r.fromConfig(cfg); err == nil && l != nil {
			names = append(names, l.Name())
		}
	}
	return names
}
