package sink

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/alertmanager"
)

// AlertSettings are the Alertmanager sink's flags.
type AlertSettings struct {
	// URL, when set, sends alerts to this Alertmanager.
	URL string
	// ResendInterval is how often open alerts are re-sent (0: the default,
	// alertmanager.DefaultResendInterval).
	ResendInterval time.Duration
	// BufferSize bounds the alert changes kept while Alertmanager is
	// unreachable (0: the default, alertmanager.DefaultBufferSize).
	BufferSize int
}

func init() {
	Register(Spec[AlertSettings]{
		Name:       alertmanager.Name,
		LeaderOnly: true,
		Flags: func(fs *pflag.FlagSet, s *AlertSettings) {
			fs.StringVar(&s.URL, "alertmanager-url", s.URL, "send one alert per finding to this Alertmanager (v2 API); empty disables alerts")
			fs.DurationVar(&s.ResendInterval, "alert-resend-interval", s.ResendInterval, "re-send open alerts this often (0: the default, 1m)")
			fs.IntVar(&s.BufferSize, "alert-buffer-size", s.BufferSize, "alert changes kept while Alertmanager is unreachable (0: the default, 10000)")
		},
		Enabled: func(s AlertSettings) bool { return s.URL != "" },
		New: func(env Env, s AlertSettings) ([]core.OutputSink, error) {
			a, err := alertmanager.New(alertmanager.Options{
				URL: s.URL, ResendInterval: s.ResendInterval, BufferSize: s.BufferSize,
				Logger: env.Logger.With("sink", alertmanager.Name), Registerer: env.Registerer, Clock: env.Clock,
			})
			if err != nil {
				return nil, fmt.Errorf("alertmanager sink: %w", err)
			}
			return []core.OutputSink{a}, nil
		},
		Metrics: func(r prometheus.Registerer) { alertmanager.NewMetrics(r) },
	})
}
