package manager

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/exception"
)

// newExceptions returns the exception loader, its metrics reporting the
// exceptions the engine applies. It exists before the layers are set up so
// they can subscribe to its changes.
func newExceptions(mgr ctrl.Manager, eng *engine.Engine, cfg *Config, clk clock.WithDelayedExecution, reg prometheus.Registerer, log *slog.Logger) *exception.Loader {
	m := exception.NewMetrics(reg)
	eng.ReportExceptions(m)
	return exception.NewLoader(mgr.GetCache(), eng, exception.Options{
		Clock: clk, AllowedNamespaces: cfg.ExceptionNamespaces, MaxDuration: cfg.ExceptionMaxDuration, Logger: log, Metrics: m,
	})
}

// setupExceptions adds the exception loader (every replica) and its status
// writer (the leader), which follows the rule set for matchedRules.
func setupExceptions(mgr ctrl.Manager, d Deps) error {
	l := d.Exceptions
	if err := l.SetupWithManager(mgr); err != nil {
		return err
	}
	rules := func() []*core.Rule {
		var out []*core.Rule
		for _, r := range d.Engine.Rules() {
			out = append(out, r.Rule)
		}
		return out
	}
	st := exception.NewStatusReconciler(mgr.GetClient(), l, rules, mgr.GetEventRecorder("portal"))
	d.Rules.OnChange(st.RulesChanged)
	return st.SetupWithManager(mgr)
}
