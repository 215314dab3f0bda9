package manager

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/exception"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/rule"
)

// Layer is one room of Portal that a configuration switches on. Layers
// meet only on the Board, never each other, in two phases: every enabled
// layer provides, then every one sets up. Neither phase depends on the
// order of the layers.
type Layer interface {
	// Name is the layer's name in logs and errors.
	Name() string
	// Provide puts on b what this layer offers the others: a value (Offer),
	// or a constructor run once the manager exists (Provide). It runs
	// before the manager exists, so it needs nothing of it.
	Provide(b *Board) error
	// Setup adds the layer's controllers, webhooks and runnables to the
	// manager, with what it asks d.Board for. It runs before the manager
	// starts, once every layer has provided.
	Setup(d Deps) error
}

// What layers put on the board for each other, besides the components
// themselves (core.OutputSink, core.VerdictSink, *actions.Engine,
// *findings.Pipeline).
type (
	// managerOption changes the manager's options before the manager
	// exists: admission brings its webhook server.
	managerOption func(*ctrl.Options)
	// findingsProducer says a layer publishes findings. The findings
	// pipeline and its sinks are built only when some layer offers one:
	// admission alone starts no report writer.
	findingsProducer struct{}
)

// Deps are what the layers share.
type Deps struct {
	Manager ctrl.Manager
	// Board holds what the layers provided for each other: the findings
	// pipeline (*findings.Pipeline, absent when no enabled layer produces
	// findings), its sinks, admission's verdict sink.
	Board *Board
	// Clock is the one clock of the process: layers whose options take a
	// clock get this one, so a test can move them all together.
	Clock clock.WithTicker
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

// provideLayers runs the first phase: each layer puts on b what it offers.
func provideLayers(ls []Layer, b *Board) error {
	for _, l := range ls {
		if err := l.Provide(b); err != nil {
			return fmt.Errorf("%s layer: %w", l.Name(), err)
		}
	}
	return nil
}

// setupLayers runs the second phase: each layer sets up with the shared
// dependencies and what it asks the board for.
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
