package manager

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/forward"
)

// ActionsConfig configures the response actions layer.
type ActionsConfig struct {
	Enabled bool
	// Types are the action types that may run (--actions-enabled); the
	// Helm chart grants RBAC for exactly these.
	Types []string
	// DryRun logs what every action would do and does nothing.
	DryRun           bool
	Workers          int
	QueueSize        int
	CacheSize        int
	DefaultRateLimit string
	// Protected namespaces are never targets of evict,
	// patch-networkpolicy or revoke-sa-token; Portal's own always is.
	Protected []string
	// Forward carries the verdicts of replicas that do not lead to the
	// leader (forward.go).
	Forward ForwardConfig
}

func defaultActions() ActionsConfig {
	return ActionsConfig{
		Workers: actions.DefaultWorkers, QueueSize: actions.DefaultQueueSize, CacheSize: actions.DefaultCacheSize,
		DefaultRateLimit: actions.DefaultRateLimit, Protected: core.SystemNamespaces(),
		Forward: ForwardConfig{TokenFile: forward.DefaultTokenFile, QueueSize: forward.DefaultQueueSize},
	}
}

// actionsLayer runs the response actions on the leader. It provides its
// engine as a findings sink (state: it sees findings open and clear) and as
// admission's verdict sink (events, handed over without blocking the
// webhook); the board builds it once for both.
type actionsLayer struct {
	cfg        ActionsConfig
	alertsSink bool
	admission  bool
	// forward is the verdict forwarding, built with the engine.
	forward *forwarding
}

func (*actionsLayer) Name() string { return "actions" }

// metricsSections implements registeredLayer.
func (*actionsLayer) metricsSections() []MetricsSection {
	return []MetricsSection{{"Response actions", "response-actions", func(r prometheus.Registerer) {
		actions.NewMetrics(r)
		forward.NewMetrics(r)
	}}}
}

// Provide offers the engine to the findings pipeline and to admission.
func (l *actionsLayer) Provide(b *Board) error {
	return Provide(b, "actions layer", l.newEngine, KeyOf[core.OutputSink](), KeyOf[core.VerdictSink]())
}

func (l *actionsLayer) newEngine(d Deps) (*actions.Engine, error) {
	mgr := d.Manager
	// evict posts through its own policy/v1 client (no client-side retry
	// of a PodDisruptionBudget's 429); without one the first eviction
	// would panic the leader.
	policy, err := actions.NewPolicyClient(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	fwd, err := l.newForwarding(d)
	if err != nil {
		return nil, err
	}
	return actions.New(actions.Options{
		Forward: fwd.sink(),
		Env: actions.Env{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Policy: policy,
			AlertsSink: l.alertsSink, Logger: d.Logger},
		Enabled: l.cfg.Types, Workers: l.cfg.Workers, QueueSize: l.cfg.QueueSize, CacheSize: l.cfg.CacheSize,
		DryRun: l.cfg.DryRun, DefaultRateLimit: l.cfg.DefaultRateLimit, Namespace: d.Namespace,
		Protected: l.cfg.Protected, Recorder: mgr.GetEventRecorder("portal-actions"),
		Logger: d.Logger, Registerer: d.Registerer, Clock: d.Clock,
	})
}

func (l *actionsLayer) Setup(d Deps) error {
	eng, err := One[*actions.Engine](d.Board)
	if err != nil {
		return err
	}
	pipeline, err := One[*findings.Pipeline](d.Board)
	if err != nil {
		return err
	}
	if pipeline == nil && !l.admission {
		return errors.New("nothing feeds the actions: enable --audit (findings), --admission or --runtime (verdicts)")
	}
	if err := l.forward.setup(d, eng); err != nil {
		return err
	}
	return d.Manager.Add(eng)
}

// actionsStatus writes ActionsReady on every rule with actions, whether the
// layer is on or not.
func actionsStatus(cfg *Config, d Deps) error {
	st := actions.NewStatus(actions.StatusOptions{
		Client: d.Manager.GetClient(), Layer: cfg.Actions.Enabled, Enabled: cfg.Actions.Types, DryRun: cfg.Actions.DryRun,
		AlertSink: cfg.Sinks.Enabled("alertmanager"), Logger: d.Logger,
		Rules: func() []*core.Rule {
			rs := d.Rules.Rules()
			out := make([]*core.Rule, 0, len(rs))
			for _, r := range rs {
				out = append(out, r.Rule)
			}
			return out
		},
	})
	d.Rules.OnChange(st.Notify)
	return d.Manager.Add(st)
}

func (*actionsLayer) fromConfig(cfg *Config) (Layer, error) {
	if !cfg.Actions.Enabled {
		return nil, nil
	}
	return &actionsLayer{cfg: cfg.Actions, alertsSink: cfg.Sinks.Enabled("alertmanager"), admission: cfg.Admission.Enabled}, nil
}

func (*actionsLayer) AddFlags(f *pflag.FlagSet, cfg *Config) {
	ac := &cfg.Actions
	f.BoolVar(&ac.Enabled, "actions", ac.Enabled, "run the rules' response actions on the leader, from audit findings and admission verdicts")
	f.StringSliceVar(&ac.Types, "actions-enabled", ac.Types, "action types that may run: "+strings.Join(actions.Types(), ", ")+" (grant the RBAC each needs); others are reported as disabled")
	f.BoolVar(&ac.DryRun, "actions-dry-run", ac.DryRun, "log what every action would do and change nothing")
	f.IntVar(&ac.Workers, "actions-workers", ac.Workers, "actions run at once (the actions on one object always run in order)")
	f.IntVar(&ac.QueueSize, "actions-queue-size", ac.QueueSize, "actions waiting, and admission verdicts waiting; a verdict that finds its queue full is dropped and counted")
	f.IntVar(&ac.CacheSize, "actions-cache-size", ac.CacheSize, "idempotency keys and rate-limit windows kept (LRU)")
	f.StringVar(&ac.DefaultRateLimit, "actions-default-rate-limit", ac.DefaultRateLimit, "rate limit per rule, target and action of actions without rateLimit, as COUNT/UNIT (s, min, h)")
	f.StringSliceVar(&ac.Protected, "actions-protected-namespaces", ac.Protected, "namespaces evict, patch-networkpolicy and revoke-sa-token never act in (Portal's own always)")
	addForwardFlags(f, &ac.Forward)
}

func (*actionsLayer) CheckFlags(cfg *Config) error {
	a := &cfg.Actions
	for _, t := range a.Types {
		if !slices.Contains(actions.Types(), t) {
			return fmt.Errorf("--actions-enabled: %q is not one of %s", t, strings.Join(actions.Types(), ", "))
		}
	}
	if _, err := actions.ParseRateLimit(a.DefaultRateLimit); err != nil {
		return fmt.Errorf("--actions-default-rate-limit: %w", err)
	}
	if a.Workers <= 0 || a.QueueSize <= 0 || a.CacheSize <= 0 {
		return fmt.Errorf("--actions-workers (%d), --actions-queue-size (%d) and --actions-cache-size (%d) must be positive", a.Workers, a.QueueSize, a.CacheSize)
	}
	return checkForwardFlags(cfg)
}
