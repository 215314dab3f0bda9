package sink

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/core"
	promsink "github.com/vilaca/portal/internal/sink/prometheus"
)

// The violations gauge runs on every replica: each exports the same values
// from its own evaluation, so the gauge survives a failover without a gap.
func init() {
	Register(Spec[bool]{
		Name:     promsink.Name,
		Defaults: true,
		Flags: func(fs *pflag.FlagSet, on *bool) {
			fs.BoolVar(on, "audit-metrics", *on, "export portal_audit_violations")
		},
		Enabled: func(on bool) bool { return on },
		New: func(env Env, _ bool) ([]core.OutputSink, error) {
			return []core.OutputSink{promsink.New(env.Registerer)}, nil
		},
		Metrics: func(r prometheus.Registerer) { promsink.New(r) },
	})
}
