package manager

import (
	"errors"
	"time"

	"github.com/vilaca/portal/internal/audit"
	"github.com/vilaca/portal/internal/lookup"
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
	// Sinks selects and configures the outputs of the findings pipeline,
	// which every producer of findings shares; they sit here because their
	// flags came with audit.
	Sinks sink.Options
}

func defaultAudit() AuditConfig {
	return AuditConfig{ResyncPeriod: audit.DefaultResyncPeriod, Workers: audit.DefaultWorkers, EvalTimeout: audit.DefaultEvalTimeout, Sinks: sink.Defaults()}
}

// auditLayer is the L5 continuous audit: informers and evaluation, whose
// findings go to the findings pipeline (reports, alerts, metrics, logs).
type auditLayer struct{ cfg AuditConfig }

func (*auditLayer) Name() string { return "audit" }

// ProducesFindings implements findingsProducer.
func (*auditLayer) ProducesFindings() bool { return true }

// Setup adds the rule status counts and the audit source, which publishes
// into the findings pipeline and follows the rule set to start and stop its
// watches.
func (l *auditLayer) Setup(d Deps) error {
	if d.Findings == nil {
		return errors.New("no findings pipeline to publish into")
	}
	counts := rule.NewStatusCounts(d.Manager.GetClient(), rule.CountOptions{Logger: d.Logger, Registerer: d.Registerer})
	if err := d.Manager.Add(counts); err != nil {
		return err
	}
	layer, err := audit.Setup(d.Manager, d.Engine, audit.Options{
		RulesLoaded:  d.RulesLoaded,
		ResyncPeriod: l.cfg.ResyncPeriod,
		Workers:      l.cfg.Workers,
		EvalTimeout:  l.cfg.EvalTimeout,
		Findings:     d.Findings,
		Cache:        d.Cache,
		RuleCounter:  counts,
		Logger:       d.Logger,
		Registerer:   d.Registerer,
	})
	if err != nil {
		return err
	}
	d.Rules.OnChange(layer.Source.RulesChanged)
	if d.Lookups != nil {
		src := layer.Source
		d.Lookups.SetRequeuer(lookup.RequeueFunc(func(o lookup.ObjectKey) {
			src.Requeue(o.GVK.GroupKind(), o.Namespace, o.Name)
		}))
	}
	return nil
}
