package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/exepages"
	"github.com/vilaca/portal/internal/flagalias"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/sink"
)

func newRunCommand() *cobra.Command {
	cfg := manager.Defaults()
	logLevel := "info"
	kubeconfig := ""
	dropPages := true
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run Portal's controllers against the cluster in the kubeconfig",
		Long: `Run Portal's controller manager: rule loading from PortalClusterRule and
PortalRule objects (and --rules-folder), their status, and the layers enabled
by flag. In a cluster it uses the pod's service account; outside, the
kubeconfig ($KUBECONFIG or --kubeconfig).

` + layersHelp(),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return usageError(err)
			}
			cfg.Logger = log
			if err := checkManagerFlags(&cfg); err != nil {
				return usageError(err)
			}
			restCfg, err := restConfig(kubeconfig)
			if err != nil {
				return usageError(err)
			}
			gcPercent, memLimit := applyGCDefaults(os.Getenv, cgroupMemoryMax, runGCPercent)
			log.Info("go runtime", "gcPercent", gcPercent, "memoryLimitBytes", memLimit)
			if dropPages {
				// Once after every init, before the manager starts, and
				// once it serves: what only start-up needed (the inits,
				// then discovery, certificates, the first rule load) is
				// not resident any more.
				dropStartupPages(log, "init")
				cfg.OnReady = func() { dropStartupPages(log, "ready") }
			}
			return manager.Run(cmd.Context(), restCfg, cfg)
		},
	}
	addManagerFlags(cmd.Flags(), &cfg)
	cmd.Flags().StringVar(&logLevel, "log-level", logLevel, "debug, info, warn or error")
	cmd.Flags().BoolVar(&dropPages, "drop-executable-pages", dropPages, "on Linux, once started, unmap the pages of the portal executable that start-up touched and drop them from the page cache, so resident memory holds the pages Portal goes on using instead of most of the binary; each page is read again from disk when first used again (docs/performance.md)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", kubeconfig, "kubeconfig to use outside a cluster (default: $KUBECONFIG, then ~/.kube/config)")
	return cmd
}

// dropStartupPages runs exepages.Drop and logs how it went.
func dropStartupPages(log *slog.Logger, stage string) {
	if n, err := exepages.Drop(); err != nil {
		log.Warn("could not drop the executable's start-up pages; resident memory stays higher", "stage", stage, "err", err)
	} else {
		log.Debug("dropped the executable's start-up pages", "stage", stage, "mappedBytes", n)
	}
}

// restConfig reads --kubeconfig when given, else what controller-runtime
// finds: $KUBECONFIG, the in-cluster service account, ~/.kube/config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return ctrl.GetConfig()
}

// checkManagerFlags rejects the values of the shared flags that cannot work:
// the manager's own, then each layer's.
func checkManagerFlags(cfg *manager.Config) error {
	if cfg.Namespace == "" {
		return errors.New("--namespace must name Portal's own namespace")
	}
	if cfg.LeaderElection && cfg.LeaderElectionID == "" {
		return errors.New("--leader-election-id must name the Lease when --leader-elect is on")
	}
	if cfg.RuleBudget.Operations <= 0 || cfg.RuleBudget.Bytes <= 0 {
		return fmt.Errorf("--rule-max-operations (%d) and --rule-max-bytes (%d) must be positive", cfg.RuleBudget.Operations, cfg.RuleBudget.Bytes)
	}
	if cfg.Lookup.MaxDependencies <= 0 || cfg.Lookup.CycleLimit <= 0 || cfg.Lookup.CycleWindow <= 0 {
		return fmt.Errorf("--lookup-max-dependencies (%d), --lookup-cycle-limit (%d) and --lookup-cycle-window (%s) must be positive", cfg.Lookup.MaxDependencies, cfg.Lookup.CycleLimit, cfg.Lookup.CycleWindow)
	}
	if _, err := rule.ParseTenantKinds(cfg.AllowTenantKinds); err != nil {
		return fmt.Errorf("--allow-tenant-kinds: %w", err)
	}
	for _, p := range cfg.ExceptionNamespaces {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("--exception-namespaces: %q is not a namespace name or shell glob", p)
		}
	}
	if cfg.ExceptionMaxDuration < 0 {
		return fmt.Errorf("--exception-max-duration %s is negative; use 0 for no bound", cfg.ExceptionMaxDuration)
	}
	if cfg.KubeAPIBurst < 0 {
		return fmt.Errorf("--kube-api-burst %d is negative; use 0 for twice --kube-api-qps", cfg.KubeAPIBurst)
	}
	for _, l := range manager.Layers() {
		if err := l.CheckFlags(cfg); err != nil {
			return err
		}
	}
	return nil
}

// addManagerFlags binds the flags `portal run` and `portal dev` share: the
// manager's own here, each layer's by the layer.
func addManagerFlags(f *pflag.FlagSet, cfg *manager.Config) {
	f.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "Portal's own namespace (leader election, certificates; never subject to admission)")
	f.StringVar(&cfg.LeaderPod, "leader-pod", cfg.LeaderPod, "this replica's pod in --namespace, labelled "+manager.RuntimeLeaderLabel+"=true while it leads, so a Service selecting the label reaches the leader alone: the runtime endpoint, and the verdicts the other replicas forward (the chart passes $(POD_NAME))")
	f.StringVar(&cfg.RulesFolder, "rules-folder", cfg.RulesFolder, "also load rule files from this directory, reloading on change")
	f.StringVar(&cfg.MetricsAddr, "metrics-bind-address", cfg.MetricsAddr, "listen address of /metrics; 0 disables it")
	f.BoolVar(&cfg.MetricsSecure, "metrics-secure", cfg.MetricsSecure, "serve /metrics over HTTPS only to bearer tokens allowed get on the /metrics non-resource URL (TokenReview, SubjectAccessReview); false serves plain HTTP to anyone who can connect")
	f.StringVar(&cfg.MetricsCertDir, "metrics-cert-dir", cfg.MetricsCertDir, "directory with tls.crt and tls.key for the HTTPS metrics server, reloaded on change; empty: a self-signed certificate generated at start")
	f.StringVar(&cfg.HealthAddr, "health-probe-bind-address", cfg.HealthAddr, "listen address of /healthz and /readyz; 0 disables it")
	f.StringVar(&cfg.PprofAddr, "pprof-bind-address", cfg.PprofAddr, "listen address of Go's /debug/pprof/ profiles (plain HTTP, no authentication: bind it to 127.0.0.1 or keep it off); empty or 0 disables it")
	f.Float32Var(&cfg.KubeAPIQPS, "kube-api-qps", cfg.KubeAPIQPS, "client-side limit of requests per second to the API server; 0 sets none (API Priority and Fairness governs)")
	f.IntVar(&cfg.KubeAPIBurst, "kube-api-burst", cfg.KubeAPIBurst, "requests allowed above --kube-api-qps in a burst; 0 means twice --kube-api-qps")
	f.BoolVar(&cfg.LeaderElection, "leader-elect", cfg.LeaderElection, "elect one replica to write status, certificates and webhook configuration")
	f.StringVar(&cfg.LeaderElectionID, "leader-election-id", cfg.LeaderElectionID, "name of the leader election Lease in --namespace; Portal Deployments that run different layers need different names")
	f.DurationVar(&cfg.ShutdownDrain, "shutdown-drain", cfg.ShutdownDrain, "on SIGTERM, keep serving this long, closing each webhook connection after its response, before stopping: the API server's pooled connections move to the replicas that stay (0 stops at once)")

	// Rule evaluation budget (admission and audit).
	f.Int64Var(&cfg.RuleBudget.Operations, "rule-max-operations", cfg.RuleBudget.Operations, "operations one rule evaluation may run (each operator, function call and loop iteration counts) before it ends in an error")
	f.Int64Var(&cfg.RuleBudget.Bytes, "rule-max-bytes", cfg.RuleBudget.Bytes, "bytes of strings, arrays and maps one rule evaluation may build before it ends in an error")

	f.StringSliceVar(&cfg.AllowTenantKinds, "allow-tenant-kinds", cfg.AllowTenantKinds, "kinds that controllers write at a high rate (Lease, Event, EndpointSlice, Endpoints, the review APIs) which PortalRules may match anyway, as Kind.group (Lease.coordination.k8s.io) or Kind for the core group; by default a PortalRule on one of them is refused, so no tenant puts those writes behind the webhook")

	f.StringSliceVar(&cfg.ExceptionNamespaces, "exception-namespaces", cfg.ExceptionNamespaces, "namespaces (names or shell globs) whose PortalExceptions Portal honours; a PortalException elsewhere is refused in its status and exempts nothing. Empty: every namespace. PortalClusterExceptions always apply")
	f.DurationVar(&cfg.ExceptionMaxDuration, "exception-max-duration", cfg.ExceptionMaxDuration, "when set, a PortalException must set expires no later than this after its creation (e.g. 720h), or it is refused in its status and exempts nothing; 0: no bound. PortalClusterExceptions are not bound")

	// The findings pipeline's outputs, which every producer shares.
	sink.BindFlags(f, &cfg.Sinks)

	// Cross-resource lookups (cluster.* in rules).
	lk := &cfg.Lookup
	f.IntVar(&lk.MaxDependencies, "lookup-max-dependencies", lk.MaxDependencies, "entries of the lookup dependency index (what each audited object's rules read); past it the oldest are dropped and the resync covers them. Also bounds the rule/object pairs waiting for a trailing re-evaluation past --lookup-cycle-limit")
	f.IntVar(&lk.CycleLimit, "lookup-cycle-limit", lk.CycleLimit, "re-evaluations of one rule on one object that changes to what it read may trigger per --lookup-cycle-window; more are suppressed (portal_lookup_cycle_suppressed_total) and coalesced into one trailing re-evaluation when the window allows")
	f.DurationVar(&lk.CycleWindow, "lookup-cycle-window", lk.CycleWindow, "the sliding window of --lookup-cycle-limit")

	// Names Portal used before it followed controller-runtime's and kubectl's.
	flagalias.Deprecated(f, "metrics-addr", "metrics-bind-address")
	flagalias.Deprecated(f, "health-addr", "health-probe-bind-address")
	// The leader label's first use, the runtime endpoint, named its flag.
	flagalias.Deprecated(f, "runtime-leader-pod", "leader-pod")

	for _, l := range manager.Layers() {
		l.AddFlags(f, cfg)
	}
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, errors.New("--log-level: use debug, info, warn or error")
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// layersHelp says which layers run by default and which flags switch the
// others on, from the layer registry.
func layersHelp() string {
	var flags []string
	for _, l := range manager.Layers() {
		flags = append(flags, "--"+l.Name())
	}
	defaults := manager.Defaults()
	on := manager.EnabledLayerNames(&defaults)
	if len(on) == 0 {
		return fmt.Sprintf("No layer runs by default: switch each on with its flag (%s).\nWith none, Portal only loads rules and writes their status.", strings.Join(flags, ", "))
	}
	return fmt.Sprintf("Layers on by default: %s. Each has its flag (%s).", strings.Join(on, ", "), strings.Join(flags, ", "))
}
