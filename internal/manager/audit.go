package manager

import (
	"log/slog"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vilaca/portal/internal/audit"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/sink"
)

// AuditConfig configures the L5 continuous audit layer.
type AuditConfig struct {
	Enabled bool
	// ResyncPeriod re-evaluates every watched object this often, as a
	// safety net behind the watches.
	ResyncPeriod time.Duration
	// Workers bounds concurrent evaluations.
	Workers int
	// EvalTimeout is the deadline of one object's evaluation by its audit
	// rules, so no rule holds a worker longer.
	EvalTimeout time.Duration
	// Sinks selects and configures the outputs.
	Sinks sink.Options
}

func defaultAudit() AuditConfig {
	return AuditConfig{ResyncPeriod: audit.DefaultResyncPeriod, Workers: audit.DefaultWorkers, EvalTimeout: audit.DefaultEvalTimeout, Sinks: sink.Defaults()}
}

// setupAudit adds the audit layer and returns the rule target that tells it
// when rules change.
func setupAudit(mgr ctrl.Manager, eng *engine.Engine, cfg AuditConfig, next rule.Target, loaded <-chan struct{}, log *slog.Logger) (rule.Target, error) {
	so := cfg.Sinks
	so.Logger = log
	sinks, err := sink.New(mgr, so)
	if err != nil {
		return nil, err
	}
	counts := rule.NewStatusCounts(mgr.GetClient(), rule.CountOptions{Logger: log, Registerer: metrics.Registry})
	if err := mgr.Add(counts); err != nil {
		return nil, err
	}
	layer, err := audit.Setup(mgr, eng, audit.Options{
		RulesLoaded:  loaded,
		ResyncPeriod: cfg.ResyncPeriod,
		Workers:      cfg.Workers,
		EvalTimeout:  cfg.EvalTimeout,
		Sinks:        sinks,
		RuleCounter:  counts,
		Logger:       log,
	})
	if err != nil {
		return nil, err
	}
	return layer.Watch(next), nil
}
