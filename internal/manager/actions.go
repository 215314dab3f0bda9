package manager

import (
	"errors"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
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
}

func defaultActions() ActionsConfig {
	return ActionsConfig{
		Workers: actions.DefaultWorkers, QueueSize: actions.DefaultQueueSize, CacheSize: actions.DefaultCacheSize,
		DefaultRateLimit: actions.DefaultRateLimit, Protected: []string{"kube-system", "kube-public", "kube-node-lease"},
	}
}

// actionsLayer runs the response actions on the leader: a findings sink
// (state: it sees findings open and clear) and admission's verdict sink
// (events, handed over without blocking the webhook).
type actionsLayer struct {
	cfg        ActionsConfig
	alertsSink bool
	admission  bool
	eng        *actions.Engine
}

func (*actionsLayer) Name() string { return "actions" }

// engine builds the engine once: the findings pipeline and admission both
// need it before the layers' Setup.
func (l *actionsLayer) engine(d Deps) (*actions.Engine, error) {
	if l.eng != nil {
		return l.eng, nil
	}
	mgr := d.Manager
	eng, err := actions.New(actions.Options{
		Env:     actions.Env{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), AlertsSink: l.alertsSink, Logger: d.Logger},
		Enabled: l.cfg.Types, Workers: l.cfg.Workers, QueueSize: l.cfg.QueueSize, CacheSize: l.cfg.CacheSize,
		DryRun: l.cfg.DryRun, DefaultRateLimit: l.cfg.DefaultRateLimit, Namespace: d.Namespace,
		Protected: l.cfg.Protected, Recorder: mgr.GetEventRecorder("portal-actions"),
		Logger: d.Logger, Registerer: d.Registerer,
	})
	if err != nil {
		return nil, err
	}
	l.eng = eng
	return eng, nil
}

// FindingsSink implements findingsConsumer.
func (l *actionsLayer) FindingsSink(d Deps) (core.OutputSink, error) { return l.engine(d) }

// VerdictSink implements verdictConsumer.
func (l *actionsLayer) VerdictSink(d Deps) (core.VerdictSink, error) { return l.engine(d) }

func (l *actionsLayer) Setup(d Deps) error {
	eng, err := l.engine(d)
	if err != nil {
		return err
	}
	if d.Findings == nil && !l.admission {
		return errors.New("nothing feeds the actions: enable --audit (findings) or --admission (verdicts)")
	}
	return d.Manager.Add(eng)
}

// findingsConsumer is a layer that reads the findings pipeline as a sink.
type findingsConsumer interface {
	FindingsSink(d Deps) (core.OutputSink, error)
}

// verdictConsumer is a layer that takes admission's verdicts.
type verdictConsumer interface {
	VerdictSink(d Deps) (core.VerdictSink, error)
}

// verdictSink returns the sink of admission verdicts among ls, or nil.
func verdictSink(ls []Layer, d Deps) (core.VerdictSink, error) {
	for _, l := range ls {
		if c, ok := l.(verdictConsumer); ok {
			return c.VerdictSink(d)
		}
	}
	return nil, nil
}

// actionsStatus writes ActionsReady on every rule with actions, whether the
// layer is on or not.
func actionsStatus(cfg *Config, d Deps) error {
	st := actions.NewStatus(actions.StatusOptions{
		Client: d.Manager.GetClient(), Layer: cfg.Actions.Enabled, Enabled: cfg.Actions.Types, DryRun: cfg.Actions.DryRun,
		Logger: d.Logger,
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
