package manager

import (
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/network"
)

// NetworkConfig configures the L6 NetworkPolicy analyser.
type NetworkConfig struct {
	Enabled bool
	// Checks selects the checks and their thresholds; Portal's own
	// namespace is always added to its excluded namespaces.
	Checks network.Config
	// Workers bounds concurrent namespace analyses.
	Workers int
	// ResyncPeriod re-analyses every namespace this often, a safety net
	// behind the events; 0 disables it.
	ResyncPeriod time.Duration
}

func defaultNetwork() NetworkConfig {
	return NetworkConfig{Checks: network.DefaultConfig(), Workers: network.DefaultWorkers, ResyncPeriod: network.DefaultResyncPeriod}
}

// networkLayer is the L6 NetworkPolicy analyser, a producer of findings.
type networkLayer struct{ cfg NetworkConfig }

func (*networkLayer) Name() string { return "network" }

// metricsSections implements registeredLayer.
func (*networkLayer) metricsSections() []MetricsSection {
	return []MetricsSection{{"Network analysis", "network-analysis", func(r prometheus.Registerer) { network.NewMetrics(r) }}}
}

// Provide says the analyser publishes findings, so the pipeline is built.
func (*networkLayer) Provide(b *Board) error {
	Offer(b, "network layer", findingsProducer{})
	return nil
}

func (l *networkLayer) Setup(d Deps) error {
	pipeline, err := publishTo(d)
	if err != nil {
		return err
	}
	checks := l.cfg.Checks
	checks.ExcludeNamespaces = slices.Clone(checks.ExcludeNamespaces)
	if d.Namespace != "" && !slices.Contains(checks.ExcludeNamespaces, d.Namespace) {
		checks.ExcludeNamespaces = append(checks.ExcludeNamespaces, d.Namespace)
	}
	resync := l.cfg.ResyncPeriod
	if resync == 0 {
		resync = -1
	}
	_, err = network.Setup(d.Manager, network.Options{
		Config: checks, Cache: d.Cache, Findings: pipeline, Workers: l.cfg.Workers,
		ResyncPeriod: resync, Logger: d.Logger, Registerer: d.Registerer, Clock: d.Clock,
	})
	return err
}

func (*networkLayer) fromConfig(cfg *Config) (Layer, error) {
	if !cfg.Network.Enabled {
		return nil, nil
	}
	return &networkLayer{cfg: cfg.Network}, nil
}

func (*networkLayer) AddFlags(f *pflag.FlagSet, cfg *Config) {
	nw := &cfg.Network
	f.BoolVar(&nw.Enabled, "network", nw.Enabled, "run the NetworkPolicy analyser: findings on NetworkPolicies and Namespaces into reports, alerts, metrics and logs (L6)")
	network.BindFlags(f, &nw.Checks)
	network.BindBudgetFlags(f, &nw.Checks)
	f.IntVar(&nw.Workers, "network-workers", nw.Workers, "concurrent namespace analyses")
	f.DurationVar(&nw.ResyncPeriod, "network-resync-period", nw.ResyncPeriod, "re-analyse every namespace this often, a safety net behind the watch events; 0 disables it")
}

func (*networkLayer) CheckFlags(cfg *Config) error {
	if err := cfg.Network.Checks.Validate(); err != nil {
		return err
	}
	if cfg.Network.Workers <= 0 {
		return fmt.Errorf("--network-workers %d must be positive", cfg.Network.Workers)
	}
	return nil
}
