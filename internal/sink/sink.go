// Package sink builds the output sinks of the findings pipeline from a
// registry. Each sink lives in its own package and implements
// core.OutputSink; one Register call in this package (a file per sink:
// policyreport.go, alertmanager.go, prometheus.go, stdout.go) says
// everything else Portal needs to know about it: its name, its flags and the
// settings they fill, when it is on, how it is built, whether it runs only on
// the leader and which metrics it registers. sink.New, BindFlags, the metrics
// docs (hack/metricsdocs) and the chart's checks (deploy/helm) iterate the
// registry, so adding a sink edits nothing else
// (docs/contributing/adding-a-sink.md).
package sink

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vilaca/portal/internal/core"
)

// Env is what a sink's constructor is given.
type Env struct {
	// Manager gives the API clients of the sinks that write to the cluster;
	// nil where none is running (tests of the other sinks).
	Manager ctrl.Manager
	// Logger is the process's; a sink tags its lines as it needs.
	Logger *slog.Logger
	// Registerer receives the sink's metrics.
	Registerer prometheus.Registerer
	// Clock tells the sink the time: windows, expiries and backoffs.
	Clock clock.WithTicker
}

// Spec describes one sink with S, the settings its flags fill.
type Spec[S any] struct {
	// Name is the sink's key in the registry and in Options.Enabled.
	Name string
	// LeaderOnly runs the sink only on the leader, so a cluster writes each
	// report or sends each alert once; false runs it on every replica.
	LeaderOnly bool
	// Defaults are the settings before any flag is parsed.
	Defaults S
	// Flags binds the sink's flags into s.
	Flags func(fs *pflag.FlagSet, s *S)
	// Enabled reports whether s turns the sink on.
	Enabled func(s S) bool
	// New builds the sink (or sinks: one per report format) from s. It is
	// only called when Enabled(s).
	New func(env Env, s S) ([]core.OutputSink, error)
	// Metrics registers the metrics the sink registers at start, so the
	// metrics docs list them; nil when it has none.
	Metrics func(r prometheus.Registerer)
}

// Registration is a Spec with its settings type erased, as the registry
// holds it.
type Registration struct {
	Name       string
	LeaderOnly bool
	// Metrics is Spec.Metrics (nil: none).
	Metrics func(r prometheus.Registerer)

	defaults func() any
	flags    func(fs *pflag.FlagSet, s any)
	enabled  func(s any) bool
	build    func(env Env, s any) ([]core.OutputSink, error)
}

// Describe erases sp's settings type. Register(sp) adds Describe(sp) to the
// registry; tools that derive from the registry (the metrics docs) take a
// Describe'd spec in their tests without registering it.
func Describe[S any](sp Spec[S]) Registration {
	return Registration{
		Name: sp.Name, LeaderOnly: sp.LeaderOnly, Metrics: sp.Metrics,
		defaults: func() any { s := sp.Defaults; return &s },
		flags:    func(fs *pflag.FlagSet, s any) { sp.Flags(fs, s.(*S)) },
		enabled:  func(s any) bool { return sp.Enabled(*s.(*S)) },
		build:    func(env Env, s any) ([]core.OutputSink, error) { return sp.New(env, *s.(*S)) },
	}
}

// registry holds the sinks, by name, filled by init functions only.
var registry []Registration

// Register adds a sink. It is called from init functions; a sink without a
// name, flags, switch or constructor, or a second one by the same name,
// panics at start.
func Register[S any](sp Spec[S]) {
	if sp.Name == "" || sp.Flags == nil || sp.Enabled == nil || sp.New == nil {
		panic(fmt.Sprintf("sink: registration %q lacks a name, Flags, Enabled or New", sp.Name))
	}
	i, dup := slices.BinarySearchFunc(registry, sp.Name, func(r Registration, n string) int { return cmp.Compare(r.Name, n) })
	if dup {
		panic("sink: " + sp.Name + " registered twice")
	}
	registry = slices.Insert(registry, i, Describe(sp))
}

// Registrations returns every registered sink, by name.
func Registrations() []Registration { return slices.Clone(registry) }

// Options select and configure the sinks: the settings of each registered
// sink, which BindFlags binds, and what every sink is given. Options hold
// the settings by reference: a copy shares them with the original, as the
// flags bound into one do. A sink whose settings Options does not hold
// (the zero Options) runs with its defaults, as with no flag set: build
// Options with Defaults, or Parse the flags that turn sinks off.
type Options struct {
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the sinks' metrics. Default: controller-runtime's
	// metrics.Registry.
	Registerer prometheus.Registerer
	// Clock, default clock.RealClock{}.
	Clock clock.WithTicker

	// settings are each sink's, by name; a sink missing here has its
	// defaults.
	settings map[string]any
}

// Defaults returns every registered sink's default settings: wgpolicyk8s
// reports, the Prometheus gauge and the log.
func Defaults() Options {
	var o Options
	o.init()
	return o
}

// init gives every registered sink its settings, defaults where unset.
func (o *Options) init() {
	if o.settings == nil {
		o.settings = make(map[string]any, len(registry))
	}
	for _, r := range registry {
		if _, ok := o.settings[r.Name]; !ok {
			o.settings[r.Name] = r.defaults()
		}
	}
}

// BindFlags binds every registered sink's flags into o.
func BindFlags(fs *pflag.FlagSet, o *Options) {
	o.init()
	for _, r := range registry {
		r.flags(fs, o.settings[r.Name])
	}
}

// Parse sets sink flags from command-line arguments ("--report-format=none"),
// as `portal run` would: for callers that configure sinks in code (tests,
// benchmarks).
func (o *Options) Parse(args ...string) error {
	fs := pflag.NewFlagSet("sinks", pflag.ContinueOnError)
	BindFlags(fs, o)
	return fs.Parse(args)
}

// Enabled reports whether the sink registered as name is on.
func (o *Options) Enabled(name string) bool {
	o.init()
	for _, r := range registry {
		if r.Name == name {
			return r.enabled(o.settings[name])
		}
	}
	return false
}

// New builds the sinks o enables, in the registry's order. Reports are
// written with mgr's client and adopted through its API reader.
func New(mgr ctrl.Manager, o Options) ([]core.OutputSink, error) {
	o.init()
	env := Env{Manager: mgr, Logger: cmp.Or(o.Logger, slog.Default()), Registerer: o.Registerer, Clock: o.Clock}
	if env.Registerer == nil {
		env.Registerer = metrics.Registry
	}
	if env.Clock == nil {
		env.Clock = clock.RealClock{}
	}
	var out []core.OutputSink
	for _, r := range registry {
		s := o.settings[r.Name]
		if !r.enabled(s) {
			continue
		}
		built, err := r.build(env, s)
		if err != nil {
			return nil, err
		}
		for _, b := range built {
			out = append(out, placed(b, r.LeaderOnly))
		}
	}
	return out, nil
}
