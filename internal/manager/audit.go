package manager

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/audit"
	"github.com/vilaca/portal/internal/exception"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/rule"
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
}

func defaultAudit() AuditConfig {
	return AuditConfig{ResyncPeriod: audit.DefaultResyncPeriod, Workers: audit.DefaultWorkers, EvalTimeout: audit.DefaultEvalTimeout}
}

// auditLayer is the L5 continuous audit: informers and evaluation, whose
// findings go to the findings pipeline (reports, alerts, metrics, logs).
type auditLayer struct{ cfg AuditConfig }

func (*auditLayer) Name() string { return "audit" }

// metricsSections implements registeredLayer.
func (*auditLayer) metricsSections() []MetricsSection {
	return []MetricsSection{{"Audit", "audit", func(r prometheus.Registerer) {
		audit.NewMetrics(r)
		rule.NewStatusCounts(nil, rule.CountOptions{Registerer: r})
	}}}
}

// Provide says audit publishes findings, so the pipeline is built.
func (*auditLayer) Provide(b *Board) error {
	Offer(b, "audit layer", findingsProducer{})
	return nil
}

// Setup adds the rule status counts and the audit source, which publishes
// into the findings pipeline and follows the rule set to start and stop its
// watches.
func (l *auditLayer) Setup(d Deps) error {
	pipeline, err := publishTo(d)
	if err != nil {
		return err
	}
	counts := rule.NewStatusCounts(d.Manager.GetClient(), rule.CountOptions{Logger: d.Logger, Registerer: d.Registerer, Clock: d.Clock})
	d.Rules.OnChange(func() { counts.RulesChanged(d.Engine.Rules()) })
	if err := d.Manager.Add(counts); err != nil {
		return err
	}
	var gone func(schema.GroupVersionKind, string, string)
	if d.Lookups != nil {
		gone = func(gvk schema.GroupVersionKind, ns, name string) {
			d.Lookups.Forget(lookup.ObjectKey{GVK: gvk, Namespace: ns, Name: name})
		}
	}
	layer, err := audit.Setup(d.Manager, d.Engine, audit.Options{
		Gone:         gone,
		RulesLoaded:  d.RulesLoaded,
		ResyncPeriod: l.cfg.ResyncPeriod,
		Workers:      l.cfg.Workers,
		EvalTimeout:  l.cfg.EvalTimeout,
		Findings:     pipeline,
		Cache:        d.Cache,
		RuleCounter:  counts,
		Exemptions:   exemptionCounter(d.Exceptions),
		Logger:       d.Logger,
		Registerer:   d.Registerer,
		Clock:        d.Clock,
	})
	if err != nil {
		return err
	}
	d.Rules.OnChange(layer.Source.RulesChanged)
	if d.Exceptions != nil {
		// Findings of past evaluations hold or lack an exception's skip:
		// re-evaluate what its kinds' objects now get.
		d.Exceptions.OnChange(layer.Source.RequeueKinds)
	}
	d.RuleSeries.Track(layer.Metrics.RuleErrors.MetricVec)
	if d.Lookups != nil {
		src := layer.Source
		d.Lookups.SetRequeuer(lookup.RequeueFunc(func(o lookup.ObjectKey) {
			src.Requeue(o.GVK.GroupKind(), o.Namespace, o.Name)
		}))
	}
	return nil
}

func (*auditLayer) fromConfig(cfg *Config) (Layer, error) {
	if !cfg.Audit.Enabled {
		return nil, nil
	}
	return &auditLayer{cfg: cfg.Audit}, nil
}

// AddFlags binds audit's flags and those of the findings pipeline's sinks,
// which came with audit.
func (*auditLayer) AddFlags(f *pflag.FlagSet, cfg *Config) {
	au := &cfg.Audit
	f.DurationVar(&au.EvalTimeout, "audit-eval-timeout", au.EvalTimeout, "deadline of one object's evaluation by its audit rules; a rule still running then ends in an error")
	f.BoolVar(&au.Enabled, "audit", au.Enabled, "run continuous audit of live objects into reports, alerts, metrics and logs (L5)")
	f.DurationVar(&au.ResyncPeriod, "resync-period", au.ResyncPeriod, "re-evaluate every watched object this often, a safety net behind the watches")
	f.IntVar(&au.Workers, "audit-workers", au.Workers, "concurrent audit evaluations")
}

func (*auditLayer) CheckFlags(cfg *Config) error {
	if cfg.Audit.EvalTimeout <= 0 {
		return fmt.Errorf("--audit-eval-timeout %s must be positive", cfg.Audit.EvalTimeout)
	}
	return nil
}

// exemptionCounter is l as the audit's exemption counter, or none: a nil
// *exception.Loader must not become a non-nil interface.
func exemptionCounter(l *exception.Loader) findings.ExemptionCounter {
	if l == nil {
		return nil
	}
	return l
}
