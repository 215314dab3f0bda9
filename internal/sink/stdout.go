package sink

import (
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/stdout"
)

// The log runs on the leader only, so a cluster logs each transition once.
func init() {
	Register(Spec[bool]{
		Name:       stdout.Name,
		LeaderOnly: true,
		Defaults:   true,
		Flags: func(fs *pflag.FlagSet, on *bool) {
			fs.BoolVar(on, "audit-log-findings", *on, "log one JSON line per finding raised, changed and resolved")
		},
		Enabled: func(on bool) bool { return on },
		New: func(env Env, _ bool) ([]core.OutputSink, error) {
			return []core.OutputSink{stdout.New(env.Logger)}, nil
		},
	})
}
