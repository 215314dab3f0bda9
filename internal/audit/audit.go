// Package audit is Portal's continuous audit (layer 5): it evaluates the live
// objects of every kind the enabled audit rules match, the moment they
// change, and keeps their findings for the output sinks.
//
// Every replica holds one informer of the shared cluster cache
// (internal/clustercache) per audited resource, acquired and released as
// rules come and go, and a bounded pool of workers that evaluate queued
// objects off the informer goroutines. Findings go to the findings pipeline
// (internal/findings) under the producer name "audit"; every replica keeps
// the pipeline's state, and only the elected leader publishes it to the
// leader-only sinks (PolicyReports, Alertmanager, the log): when it takes
// over, its first batch is the full current state, so nothing raised during
// a failover is lost and nothing is written twice. Nothing polls: watch
// events drive evaluation and the periodic resync (default 10 min) is a
// safety net.
//
// Wiring, with mgr a controller-runtime manager, eng the rule engine, pipe
// the process's findings pipeline and loaded the channel closed once the
// rules have loaded:
//
//	layer, err := audit.Setup(mgr, eng, audit.Options{
//		RulesLoaded: loaded, Findings: pipe, RuleCounter: counts, Logger: log,
//	})
//	index.OnChange(layer.Source.RulesChanged)
package audit

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/findings"
)

// Defaults of Options.
const (
	DefaultResyncPeriod  = 10 * time.Minute
	DefaultWorkers       = 4
	DefaultSyncTimeout   = 2 * time.Minute
	DefaultRetryInterval = 10 * time.Second
	DefaultMaxBatch      = findings.DefaultMaxBatch
	// DefaultEvalTimeout bounds the evaluation of one object by all its
	// audit rules, so one rule cannot hold a worker.
	DefaultEvalTimeout = 2 * time.Second
)

// Options configure the audit layer. The zero value is usable.
type Options struct {
	// RulesLoaded is closed once the rule sources have loaded; informers
	// start after it so the first full state is complete. nil: at once.
	RulesLoaded <-chan struct{}
	// ResyncPeriod is how often every cached object is re-evaluated even
	// without an event: the safety net. Default DefaultResyncPeriod; a
	// negative value disables it.
	ResyncPeriod time.Duration
	// Workers bounds concurrent evaluations. Default DefaultWorkers.
	Workers int
	// Findings is the pipeline audit publishes into, shared with the other
	// producers of the process; the sinks are its. nil: audit builds a
	// pipeline of its own, feeding Sinks (a standalone audit).
	Findings *findings.Pipeline
	// Sinks receive the findings of a standalone audit, when Findings is
	// nil. Leader-only unless a sink says otherwise (see core.OutputSink).
	Sinks []core.OutputSink
	// RuleCounter, when set, receives evaluation and violation counts for
	// rule status.
	RuleCounter RuleCounter
	// Exemptions, when set, receives how many audited objects each
	// exception exempts now, for its status.
	Exemptions findings.ExemptionCounter
	// Cache is the shared cluster cache the informers come from. Default:
	// a cache of the audit layer's own, added to the manager.
	Cache *clustercache.Cache
	// RestConfig is the connection the informers of the audit layer's own
	// cache use (ignored with Cache). Default: the manager's.
	RestConfig *rest.Config
	// SyncTimeout bounds the wait for an informer's initial list before the
	// sinks start without it. Default DefaultSyncTimeout.
	SyncTimeout time.Duration
	// RetryInterval is how soon a rule kind the API server does not serve
	// is looked up again, and, for a standalone audit, the first delay
	// before a failed sink batch is retried (a tenth of it, doubling up to
	// three times it). Default DefaultRetryInterval.
	RetryInterval time.Duration
	// EvalTimeout is the deadline of one object's evaluation by all its
	// rules; a rule still running then ends with a budget error. Default
	// DefaultEvalTimeout.
	EvalTimeout time.Duration
	// Gone, when set, hears of each evaluated object found deleted, so the
	// lookup layer drops what it holds for it.
	Gone func(gvk schema.GroupVersionKind, namespace, name string)
	// Clock stamps when findings were seen and events observed, and times
	// the retry of unresolved kinds; default the real clock.
	Clock clock.WithTicker
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Default: controller-runtime's
	// metrics.Registry.
	Registerer prometheus.Registerer
}

// Layer is the running audit layer.
type Layer struct {
	Source *Source
	// Store is audit's producer handle on Findings.
	Store    *Store
	Findings *findings.Pipeline
	Metrics  *Metrics
}

// Setup adds the audit source to the manager and registers it as the
// producer "audit" of the findings pipeline (with a standalone audit, first
// builds that pipeline and its sink runners).
func Setup(mgr ctrl.Manager, eng *engine.Engine, o Options) (*Layer, error) {
	if eng == nil {
		return nil, errors.New("audit: engine is required")
	}
	if o.ResyncPeriod == 0 {
		o.ResyncPeriod = DefaultResyncPeriod
	}
	if o.ResyncPeriod < 0 {
		o.ResyncPeriod = 0
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.EvalTimeout <= 0 {
		o.EvalTimeout = DefaultEvalTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Logger = o.Logger.With("layer", "audit")
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	cc := o.Cache
	if cc == nil {
		cfg := o.RestConfig
		if cfg == nil {
			cfg = mgr.GetConfig()
		}
		var err error
		cc, err = clustercache.New(cfg, mgr.GetRESTMapper(), clustercache.Options{ResyncPeriod: o.ResyncPeriod, Logger: o.Logger, Registerer: o.Registerer})
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		if err := mgr.Add(cc); err != nil {
			return nil, err
		}
	}
	pipe := o.Findings
	var err error
	switch {
	case pipe != nil && len(o.Sinks) > 0:
		return nil, errors.New("audit: Sinks belong to the findings pipeline; set them there, not with Findings")
	case pipe == nil:
		pipe, err = findings.New(mgr, findings.Options{
			Sinks: o.Sinks, MinBackoff: o.RetryInterval / 10, MaxBackoff: 3 * o.RetryInterval,
			Logger: o.Logger, Registerer: o.Registerer, Clock: o.Clock,
		})
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
	}
	m := NewMetrics(o.Registerer)
	src := newSource(&o, eng, mgr.GetRESTMapper(), cc, nil, m)
	store, err := pipe.Register(ProducerName, findings.ProducerOptions{Synced: src.Synced(), Counter: o.RuleCounter, Exemptions: o.Exemptions})
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	src.store = store
	if err := mgr.Add(src); err != nil {
		return nil, err
	}
	return &Layer{Source: src, Store: store, Findings: pipe, Metrics: m}, nil
}
