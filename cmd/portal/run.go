package main

import (
	"errors"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/manager"
)

func newRunCommand() *cobra.Command {
	cfg := manager.Defaults()
	logLevel := "info"
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run Portal's controllers against the cluster in the kubeconfig",
		Long: `Run Portal's controller manager: rule loading from PortalClusterRule and
PortalRule objects (and --rules-folder), their status, and the layers enabled
by flag. In a cluster it uses the pod's service account; outside, the
kubeconfig ($KUBECONFIG or --kubeconfig).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return usageError(err)
			}
			cfg.Logger = log
			if cfg.Namespace == "" {
				return usageError(errors.New("--namespace must name Portal's own namespace"))
			}
			restCfg, err := ctrl.GetConfig()
			if err != nil {
				return usageError(err)
			}
			return manager.Run(cmd.Context(), restCfg, cfg)
		},
	}
	addManagerFlags(cmd.Flags(), &cfg)
	cmd.Flags().StringVar(&logLevel, "log-level", logLevel, "debug, info, warn or error")
	return cmd
}

// addManagerFlags binds the flags `portal run` and `portal dev` share.
func addManagerFlags(f *pflag.FlagSet, cfg *manager.Config) {
	f.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "Portal's own namespace (leader election, certificates; never subject to admission)")
	f.StringVar(&cfg.RulesFolder, "rules-folder", cfg.RulesFolder, "also load rule files from this directory, reloading on change")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", cfg.MetricsAddr, "listen address of /metrics; 0 disables it")
	f.StringVar(&cfg.HealthAddr, "health-addr", cfg.HealthAddr, "listen address of /healthz and /readyz; 0 disables it")
	f.BoolVar(&cfg.LeaderElection, "leader-elect", cfg.LeaderElection, "elect one replica to write status, certificates and webhook configuration")
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, errors.New("--log-level: use debug, info, warn or error")
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}
