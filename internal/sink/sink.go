// Package sink builds the output sinks that options enable: PolicyReports
// (wgpolicyk8s.io, openreports.io or both), Alertmanager, the Prometheus violations gauge and the log. Each sink lives
// in its own package and implements core.OutputSink; the findings pipeline
// (internal/findings) feeds them the findings of every producer.
package sink

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/alertmanager"
	"github.com/vilaca/portal/internal/sink/policyreport"
	promsink "github.com/vilaca/portal/internal/sink/prometheus"
	"github.com/vilaca/portal/internal/sink/stdout"
)

// Options select the sinks.
type Options struct {
	// ReportFormat selects the reports written: ReportsWGPolicy
	// (wgpolicyk8s.io PolicyReport and ClusterPolicyReport),
	// ReportsOpenReports (openreports.io Report and ClusterReport),
	// ReportsBoth, or ReportsNone ("" is none).
	ReportFormat string
	// ReportMaxResults bounds the results of one report (default
	// policyreport.DefaultMaxResults).
	ReportMaxResults int
	// AlertmanagerURL, when set, sends alerts to this Alertmanager.
	AlertmanagerURL string
	// AlertResendInterval is how often open alerts are re-sent (default
	// alertmanager.DefaultResendInterval).
	AlertResendInterval time.Duration
	// AlertBufferSize bounds the alert changes kept while Alertmanager is
	// unreachable (default alertmanager.DefaultBufferSize).
	AlertBufferSize int
	// Prometheus exports portal_audit_violations.
	Prometheus bool
	// Stdout logs one JSON line per finding raised, changed and resolved.
	Stdout bool

	// Logger, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the sinks' metrics. Default: controller-runtime's
	// metrics.Registry.
	Registerer prometheus.Registerer
}

// Values of Options.ReportFormat.
const (
	ReportsWGPolicy    = policyreport.FormatWGPolicy
	ReportsOpenReports = policyreport.FormatOpenReports
	ReportsBoth        = "both"
	ReportsNone        = "none"
)

// Defaults enables wgpolicyk8s reports, the Prometheus gauge and the log.
func Defaults() Options {
	return Options{ReportFormat: ReportsWGPolicy, Prometheus: true, Stdout: true}
}

// reportFormats maps an Options.ReportFormat to the report sinks' formats.
func reportFormats(f string) ([]string, error) {
	switch f {
	case "", ReportsNone:
		return nil, nil
	case ReportsWGPolicy, ReportsOpenReports:
		return []string{f}, nil
	case ReportsBoth:
		return []string{ReportsWGPolicy, ReportsOpenReports}, nil
	}
	return nil, fmt.Errorf("report format %q is not one of %s, %s, %s, %s", f, ReportsWGPolicy, ReportsOpenReports, ReportsBoth, ReportsNone)
}

// New builds the enabled sinks. Reports are written with mgr's client and
// adopted through its API reader.
func New(mgr ctrl.Manager, o Options) ([]core.OutputSink, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	formats, err := reportFormats(o.ReportFormat)
	if err != nil {
		return nil, err
	}
	var out []core.OutputSink
	for _, f := range formats {
		s, err := policyreport.New(policyreport.Options{
			Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Format: f, MaxResults: o.ReportMaxResults,
			Logger: o.Logger.With("sink", f), Registerer: o.Registerer,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if o.AlertmanagerURL != "" {
		s, err := alertmanager.New(alertmanager.Options{
			URL: o.AlertmanagerURL, ResendInterval: o.AlertResendInterval, BufferSize: o.AlertBufferSize,
			Logger: o.Logger.With("sink", alertmanager.Name), Registerer: o.Registerer,
		})
		if err != nil {
			return nil, fmt.Errorf("alertmanager sink: %w", err)
		}
		out = append(out, s)
	}
	if o.Prometheus {
		out = append(out, promsink.New(o.Registerer))
	}
	if o.Stdout {
		out = append(out, stdout.New(o.Logger))
	}
	return out, nil
}
