package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/policyreport"
)

// Values of --report-format.
const (
	ReportsWGPolicy    = policyreport.FormatWGPolicy
	ReportsOpenReports = policyreport.FormatOpenReports
	ReportsBoth        = "both"
	ReportsNone        = "none"
)

// ReportSettings are the report sink's flags.
type ReportSettings struct {
	// Format selects the reports written: ReportsWGPolicy (wgpolicyk8s.io
	// PolicyReport and ClusterPolicyReport), ReportsOpenReports
	// (openreports.io Report and ClusterReport), ReportsBoth, or
	// ReportsNone ("" is none).
	Format string
	// MaxResults bounds the results of one report (0: the default,
	// policyreport.DefaultMaxResults).
	MaxResults int
	// Name names the reports this instance writes (policyreport.Options.Name).
	Name string
	// OwnerNode names the Node that owns the reports this instance writes
	// (policyreport.Options.Owner), resolved to its UID at start; "" for
	// none.
	OwnerNode string
}

// ownerLookupTimeout bounds the read of --report-owner-node's Node at start.
const ownerLookupTimeout = 30 * time.Second

func init() {
	Register(Spec[ReportSettings]{
		Name:       "policyreport",
		LeaderOnly: true,
		Defaults:   ReportSettings{Format: ReportsWGPolicy, Name: policyreport.ReportName},
		Flags: func(fs *pflag.FlagSet, s *ReportSettings) {
			fs.StringVar(&s.Format, "report-format", s.Format, "reports to write: wgpolicyk8s, openreports, both or none")
			fs.IntVar(&s.MaxResults, "report-max-results", s.MaxResults, "results per report before a namespace's report is sharded (0: the default, 50)")
			fs.StringVar(&s.Name, "report-name", s.Name, "name of the reports this instance writes (NAME, NAME-1, ... labelled portal.io/report-writer=NAME); instances that write reports at the same time need different names, as each adopts and deletes only its own (the chart names each); a name over 63 characters or ending in a number gets a hash of it added")
			fs.StringVar(&s.OwnerNode, "report-owner-node", s.OwnerNode, "Node that owns the reports this instance writes, so that the API server deletes them with the Node (a replaced control-plane node's reports would otherwise stay, as no other writer adopts them); it must exist and be readable (get on nodes); the chart's audit log DaemonSet sets it to its node")
		},
		// An unknown format is on, so that New refuses it.
		Enabled: func(s ReportSettings) bool { return s.Format != "" && s.Format != ReportsNone },
		New:     newReports,
		Metrics: func(r prometheus.Registerer) { policyreport.NewMetrics(r, ReportsWGPolicy) },
	})
}

// newReports builds one report sink per format.
func newReports(env Env, s ReportSettings) ([]core.OutputSink, error) {
	formats, err := reportFormats(s.Format)
	if err != nil {
		return nil, err
	}
	if env.Manager == nil {
		return nil, errors.New("policyreport: no manager to write reports with")
	}
	owner, err := reportOwner(env, s.OwnerNode)
	if err != nil {
		return nil, err
	}
	var out []core.OutputSink
	for _, f := range formats {
		s, err := policyreport.New(policyreport.Options{
			Client: env.Manager.GetClient(), Reader: env.Manager.GetAPIReader(), Format: f, MaxResults: s.MaxResults,
			Name: s.Name, Owner: owner,
			Logger: env.Logger.With("sink", f), Registerer: env.Registerer, Clock: env.Clock,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// reportOwner resolves --report-owner-node to the owner reference of the
// reports: nil without one. Sinks are built while the manager is assembled,
// before Run's context exists, so the one read is bounded by a timeout of
// its own; failing here stops Portal at start with the flag named, rather
// than writing reports no Node owns.
func reportOwner(env Env, node string) (*metav1.OwnerReference, error) {
	if node == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), ownerLookupTimeout)
	defer cancel()
	owner, err := policyreport.NodeOwner(ctx, env.Manager.GetAPIReader(), node)
	if err != nil {
		return nil, fmt.Errorf("--report-owner-node=%s: the Node must exist and Portal's ServiceAccount may get it: %w", node, err)
	}
	return &owner, nil
}

// reportFormats maps a --report-format to the report sinks' formats.
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
