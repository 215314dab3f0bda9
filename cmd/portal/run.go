package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/network"
)

func newRunCommand() *cobra.Command {
	cfg := manager.Defaults()
	logLevel := "info"
	kubeconfig := ""
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
			if err := checkManagerFlags(&cfg); err != nil {
				return usageError(err)
			}
			restCfg, err := restConfig(kubeconfig)
			if err != nil {
				return usageError(err)
			}
			return manager.Run(cmd.Context(), restCfg, cfg)
		},
	}
	addManagerFlags(cmd.Flags(), &cfg)
	cmd.Flags().StringVar(&logLevel, "log-level", logLevel, "debug, info, warn or error")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", kubeconfig, "kubeconfig to use outside a cluster (default: $KUBECONFIG, then ~/.kube/config)")
	return cmd
}

// restConfig reads --kubeconfig when given, else what controller-runtime
// finds: $KUBECONFIG, the in-cluster service account, ~/.kube/config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return ctrl.GetConfig()
}

// checkManagerFlags rejects the values of the shared flags that cannot work.
func checkManagerFlags(cfg *manager.Config) error {
	if cfg.Namespace == "" {
		return errors.New("--namespace must name Portal's own namespace")
	}
	if cfg.LeaderElection && cfg.LeaderElectionID == "" {
		return errors.New("--leader-election-id must name the Lease when --leader-elect is on")
	}
	if len(cfg.Admission.ClientAllowedNames) > 0 && cfg.Admission.ClientCAFile == "" {
		return errors.New("--webhook-client-allowed-names needs --webhook-client-ca-file: names are only checked on certificates that CA signed")
	}
	if cfg.RuleBudget.Operations <= 0 || cfg.RuleBudget.Bytes <= 0 {
		return fmt.Errorf("--rule-max-operations (%d) and --rule-max-bytes (%d) must be positive", cfg.RuleBudget.Operations, cfg.RuleBudget.Bytes)
	}
	if cfg.Audit.EvalTimeout <= 0 {
		return fmt.Errorf("--audit-eval-timeout %s must be positive", cfg.Audit.EvalTimeout)
	}
	if cfg.Lookup.MaxDependencies <= 0 || cfg.Lookup.CycleLimit <= 0 || cfg.Lookup.CycleWindow <= 0 {
		return fmt.Errorf("--lookup-max-dependencies (%d), --lookup-cycle-limit (%d) and --lookup-cycle-window (%s) must be positive", cfg.Lookup.MaxDependencies, cfg.Lookup.CycleLimit, cfg.Lookup.CycleWindow)
	}
	if err := checkActionsFlags(&cfg.Actions); err != nil {
		return err
	}
	if err := cfg.Network.Checks.Validate(); err != nil {
		return err
	}
	if cfg.Network.Workers <= 0 {
		return fmt.Errorf("--network-workers %d must be positive", cfg.Network.Workers)
	}
	if cfg.KubeAPIBurst < 0 {
		return fmt.Errorf("--kube-api-burst %d is negative; use 0 for twice --kube-api-qps", cfg.KubeAPIBurst)
	}
	return nil
}

// addManagerFlags binds the flags `portal run` and `portal dev` share.
func addManagerFlags(f *pflag.FlagSet, cfg *manager.Config) {
	f.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "Portal's own namespace (leader election, certificates; never subject to admission)")
	f.StringVar(&cfg.RulesFolder, "rules-folder", cfg.RulesFolder, "also load rule files from this directory, reloading on change")
	f.StringVar(&cfg.MetricsAddr, "metrics-bind-address", cfg.MetricsAddr, "listen address of /metrics; 0 disables it")
	f.BoolVar(&cfg.MetricsSecure, "metrics-secure", cfg.MetricsSecure, "serve /metrics over HTTPS only to bearer tokens allowed get on the /metrics non-resource URL (TokenReview, SubjectAccessReview); false serves plain HTTP to anyone who can connect")
	f.StringVar(&cfg.MetricsCertDir, "metrics-cert-dir", cfg.MetricsCertDir, "directory with tls.crt and tls.key for the HTTPS metrics server, reloaded on change; empty: a self-signed certificate generated at start")
	f.StringVar(&cfg.HealthAddr, "health-probe-bind-address", cfg.HealthAddr, "listen address of /healthz and /readyz; 0 disables it")
	f.Float32Var(&cfg.KubeAPIQPS, "kube-api-qps", cfg.KubeAPIQPS, "client-side limit of requests per second to the API server; 0 sets none (API Priority and Fairness governs)")
	f.IntVar(&cfg.KubeAPIBurst, "kube-api-burst", cfg.KubeAPIBurst, "requests allowed above --kube-api-qps in a burst; 0 means twice --kube-api-qps")
	f.BoolVar(&cfg.LeaderElection, "leader-elect", cfg.LeaderElection, "elect one replica to write status, certificates and webhook configuration")
	f.StringVar(&cfg.LeaderElectionID, "leader-election-id", cfg.LeaderElectionID, "name of the leader election Lease in --namespace; Portal Deployments that run different layers need different names")
	f.DurationVar(&cfg.ShutdownDrain, "shutdown-drain", cfg.ShutdownDrain, "on SIGTERM, keep serving this long, closing each webhook connection after its response, before stopping: the API server's pooled connections move to the replicas that stay (0 stops at once)")

	// Rule evaluation budget (admission and audit).
	f.Int64Var(&cfg.RuleBudget.Operations, "rule-max-operations", cfg.RuleBudget.Operations, "operations one rule evaluation may run (each operator, function call and loop iteration counts) before it ends in an error")
	f.Int64Var(&cfg.RuleBudget.Bytes, "rule-max-bytes", cfg.RuleBudget.Bytes, "bytes of strings, arrays and maps one rule evaluation may build before it ends in an error")
	f.DurationVar(&cfg.Audit.EvalTimeout, "audit-eval-timeout", cfg.Audit.EvalTimeout, "deadline of one object's evaluation by its audit rules; a rule still running then ends in an error")

	a := &cfg.Admission
	f.BoolVar(&a.Enabled, "admission", a.Enabled, "run the validating admission webhook (L4)")
	f.StringVar(&a.Host, "webhook-host", a.Host, "address the webhook server listens on; empty for all")
	f.IntVar(&a.Port, "webhook-port", a.Port, "port of the webhook server (TLS)")
	f.StringVar(&a.ServiceName, "webhook-service", a.ServiceName, "Service the API server reaches the webhook by (in Portal's namespace)")
	f.BoolVar(&a.LocalURL, "webhook-local", a.LocalURL, "point the webhook configuration at https://127.0.0.1:<webhook-port> instead of the Service, for Portal running outside the cluster next to its API server")
	f.StringVar(&a.ConfigName, "webhook-config-name", a.ConfigName, "name of the ValidatingWebhookConfiguration Portal manages")
	f.StringVar(&a.CertSource, "cert-source", a.CertSource, "webhook certificate: self (issued and renewed by Portal) or cert-manager (read from --cert-secret)")
	f.StringVar(&a.CertSecret, "cert-secret", a.CertSecret, "Secret holding the webhook serving certificate")
	f.BoolVar(&a.FailOpen, "fail-open", a.FailOpen, "failurePolicy Ignore: admit requests when Portal is unreachable (default: fail closed)")
	f.StringVar(&a.ClientCAFile, "webhook-client-ca-file", a.ClientCAFile, "accept only webhook clients presenting a certificate signed by a CA in this PEM file: the API server, configured with an AdmissionConfiguration kubeConfigFile; empty accepts any client")
	f.StringSliceVar(&a.ClientAllowedNames, "webhook-client-allowed-names", a.ClientAllowedNames, "with --webhook-client-ca-file, also require the client certificate's common name or a DNS name to be one of these")

	au := &cfg.Audit
	f.BoolVar(&au.Enabled, "audit", au.Enabled, "run continuous audit of live objects into reports, alerts, metrics and logs (L5)")
	f.DurationVar(&au.ResyncPeriod, "resync-period", au.ResyncPeriod, "re-evaluate every watched object this often, a safety net behind the watches")
	f.IntVar(&au.Workers, "audit-workers", au.Workers, "concurrent audit evaluations")
	f.StringVar(&au.Sinks.ReportFormat, "report-format", au.Sinks.ReportFormat, "reports to write: wgpolicyk8s, openreports, both or none")
	f.IntVar(&au.Sinks.ReportMaxResults, "report-max-results", au.Sinks.ReportMaxResults, "results per report before a namespace's report is sharded (0: the default, 50)")
	f.StringVar(&au.Sinks.AlertmanagerURL, "alertmanager-url", au.Sinks.AlertmanagerURL, "send one alert per finding to this Alertmanager (v2 API); empty disables alerts")
	f.DurationVar(&au.Sinks.AlertResendInterval, "alert-resend-interval", au.Sinks.AlertResendInterval, "re-send open alerts this often (0: the default, 1m)")
	f.IntVar(&au.Sinks.AlertBufferSize, "alert-buffer-size", au.Sinks.AlertBufferSize, "alert changes kept while Alertmanager is unreachable (0: the default, 10000)")
	f.BoolVar(&au.Sinks.Prometheus, "audit-metrics", au.Sinks.Prometheus, "export portal_audit_violations")
	f.BoolVar(&au.Sinks.Stdout, "audit-log-findings", au.Sinks.Stdout, "log one JSON line per finding raised, changed and resolved")

	// Cross-resource lookups (cluster.* in rules).
	lk := &cfg.Lookup
	f.IntVar(&lk.MaxDependencies, "lookup-max-dependencies", lk.MaxDependencies, "entries of the lookup dependency index (what each audited object's rules read); past it the oldest are dropped and the resync covers them")
	f.IntVar(&lk.CycleLimit, "lookup-cycle-limit", lk.CycleLimit, "re-evaluations of one rule on one object that changes to what it read may trigger per --lookup-cycle-window; more are suppressed (portal_lookup_cycle_suppressed_total)")
	f.DurationVar(&lk.CycleWindow, "lookup-cycle-window", lk.CycleWindow, "the sliding window of --lookup-cycle-limit")

	ac := &cfg.Actions
	f.BoolVar(&ac.Enabled, "actions", ac.Enabled, "run the rules' response actions on the leader, from audit findings and admission verdicts")
	f.StringSliceVar(&ac.Types, "actions-enabled", ac.Types, "action types that may run: alertmanager, label, annotate, evict, patch-networkpolicy, revoke-sa-token (grant the RBAC each needs); others are reported as disabled")
	f.BoolVar(&ac.DryRun, "actions-dry-run", ac.DryRun, "log what every action would do and change nothing")
	f.IntVar(&ac.Workers, "actions-workers", ac.Workers, "actions run at once (the actions on one object always run in order)")
	f.IntVar(&ac.QueueSize, "actions-queue-size", ac.QueueSize, "actions waiting, and admission verdicts waiting; a verdict that finds its queue full is dropped and counted")
	f.IntVar(&ac.CacheSize, "actions-cache-size", ac.CacheSize, "idempotency keys and rate-limit windows kept (LRU)")
	f.StringVar(&ac.DefaultRateLimit, "actions-default-rate-limit", ac.DefaultRateLimit, "rate limit per rule, target and action of actions without rateLimit, as COUNT/UNIT (s, min, h)")
	f.StringSliceVar(&ac.Protected, "actions-protected-namespaces", ac.Protected, "namespaces evict, patch-networkpolicy and revoke-sa-token never act in (Portal's own always)")
	nw := &cfg.Network
	f.BoolVar(&nw.Enabled, "network", nw.Enabled, "run the NetworkPolicy analyser: findings on NetworkPolicies and Namespaces into reports, alerts, metrics and logs (L6)")
	f.StringSliceVar(&nw.Checks.Checks, "network-checks", nw.Checks.Checks, "NetworkPolicy checks to run (default: all): "+strings.Join(network.Checks(), ", "))
	f.StringSliceVar(&nw.Checks.ExcludeNamespaces, "network-exclude-namespaces", nw.Checks.ExcludeNamespaces, "namespaces (names or shell globs) the NetworkPolicy analyser raises no finding in; Portal's own namespace is always excluded")
	f.IntVar(&nw.Checks.BroadCIDRIPv4Prefix, "network-broad-cidr-ipv4-prefix", nw.Checks.BroadCIDRIPv4Prefix, "np.broad-cidr flags an IPv4 ipBlock without except whose prefix is this short or shorter and not inside a private range")
	f.IntVar(&nw.Checks.BroadCIDRIPv6Prefix, "network-broad-cidr-ipv6-prefix", nw.Checks.BroadCIDRIPv6Prefix, "np.broad-cidr flags an IPv6 ipBlock without except whose prefix is this short or shorter and not inside a private range")
	f.IntVar(&nw.Checks.MaxPodVisits, "network-max-pod-visits", nw.Checks.MaxPodVisits, "pods one namespace's analysis may read while matching selectors; selectors left unchecked raise no finding")
	f.IntVar(&nw.Workers, "network-workers", nw.Workers, "concurrent namespace analyses")
	f.DurationVar(&nw.ResyncPeriod, "network-resync-period", nw.ResyncPeriod, "re-analyse every namespace this often, a safety net behind the watch events; 0 disables it")

	w := &cfg.WAFOptions
	f.BoolVar(&cfg.WAF, "waf", cfg.WAF, "run the WAF rule pipeline (RuleSource, RuleData, RuleSet) and its cache server (L7)")
	f.StringVar(&w.CacheAddr, "waf-cache-addr", w.CacheAddr, "listen address of the WAF rule cache server (TLS)")
	f.StringVar(&w.CacheService, "waf-cache-service", w.CacheService, "Service data planes reach the rule cache by (in Portal's namespace); its DNS names go into the cache's serving certificate")
	f.StringVar(&w.CacheCertSecret, "waf-cache-cert-secret", w.CacheCertSecret, "Secret (in Portal's namespace) holding the rule cache's CA and serving certificate, issued and renewed by Portal")
	f.IntVar(&w.CacheMaxConcurrent, "waf-cache-max-concurrent", w.CacheMaxConcurrent, "requests the rule cache answers at once; more get 503 with Retry-After")
	f.DurationVar(&w.CacheMaxAge, "waf-cache-max-age", w.CacheMaxAge, "evict cached rule set revisions older than this (a rule set's latest revision is never evicted)")
	f.Int64Var(&w.CacheMaxSize, "waf-cache-max-size", w.CacheMaxSize, "evict the oldest revisions when the cache holds more bytes than this")
	f.DurationVar(&w.CacheGCInterval, "waf-cache-gc-interval", w.CacheGCInterval, "how often the cache evicts")
	wc := &w.Compile
	f.Int64Var(&wc.MaxRuleSetBytes, "waf-max-ruleset-bytes", wc.MaxRuleSetBytes, "reject a RuleSet whose sources and data files hold more bytes than this together (reason TooLarge)")
	f.IntVar(&wc.MaxDataFileBytes, "waf-max-data-file-bytes", wc.MaxDataFileBytes, "reject a RuleSet whose @pmFromFile, @ipMatchFromFile or @validateSchema reads a data file larger than this (reason TooLarge)")
	f.DurationVar(&wc.CompileTimeout, "waf-compile-timeout", wc.CompileTimeout, "give up on a RuleSet compile after this long (reason CompileTimeout)")
	f.IntVar(&wc.Concurrency, "waf-compile-concurrency", wc.Concurrency, "RuleSets compiled at once; one namespace uses at most half of them (at least one)")
	f.Int64Var(&wc.MaxLastGoodBytes, "waf-max-last-good-bytes", wc.MaxLastGoodBytes, "weight of the last good WAFs kept open to speed up recompiles; the oldest are closed beyond it")
	// The Engine controller (internal/waf/engine).
	we := &w.Engine
	f.StringVar(&we.WASMImage, "waf-wasm-image", we.WASMImage, "OCI reference (oci://...) of the Coraza WASM plugin for istio-wasm Engines that name none in spec.driver.wasm.image")
	f.StringVar(&we.ProxyImage, "waf-proxy-image", we.ProxyImage, "image of the portal binary that waf-proxy Engines run when they name none in spec.driver.wafProxy.image")
	f.StringVar(&we.OperatorName, "operator-name", we.OperatorName, "name of Portal's Deployment; when set, istio-wasm Engines also apply an Istio ServiceEntry and DestinationRule (<name>-waf-cache) for the rule cache in --namespace")
	f.StringSliceVar(&we.AllowedImages, "waf-engine-allowed-images", we.AllowedImages, "image prefixes an Engine may name in spec.driver.wasm.image or spec.driver.wafProxy.image (e.g. oci://registry.example/waf/); empty: Engines get only --waf-wasm-image and --waf-proxy-image")
	f.DurationVar(&we.TokenExpiration, "waf-engine-token-expiration", we.TokenExpiration, "lifetime of the cache tokens Portal puts in WasmPlugins (at least 10m); renewed when a fifth of it is left")

	// WAF bundles in S3-compatible storage (internal/waf/bundle).
	wb := &w.Bundle
	f.StringVar(&wb.URL, "bundle-storage-url", wb.URL, "S3-compatible storage WAF bundles are fetched from and published to, http(s)://host[:port], buckets addressed by path; empty turns S3 bundles off")
	f.StringVar(&wb.Region, "bundle-storage-region", wb.Region, "region requests to bundle storage are signed for")
	f.StringVar(&wb.CredentialsSecret, "bundle-storage-credentials-secret", wb.CredentialsSecret, "Secret (NAME in --namespace, or NAMESPACE/NAME) with accessKeyID and secretAccessKey for bundle storage, watched: a change is used by the next request; empty: anonymous")
	f.StringVar(&wb.CASecret, "bundle-storage-ca-secret", wb.CASecret, "Secret (NAME or NAMESPACE/NAME) whose ca.crt verifies bundle storage's certificate, watched; empty: the system roots")
	f.StringVar(&wb.ClientCertSecret, "bundle-storage-client-cert-secret", wb.ClientCertSecret, "Secret (NAME or NAMESPACE/NAME) whose tls.crt and tls.key Portal presents to bundle storage (mutual TLS), watched")
	f.BoolVar(&wb.SkipVerify, "bundle-storage-skip-verify", wb.SkipVerify, "do not verify bundle storage's certificate (development only: anyone on the path can serve bundles, though each is still sha256-checked)")
	f.Int64Var(&wb.MaxBytes, "bundle-max-bytes", wb.MaxBytes, "refuse a bundle larger than this many bytes before reading it (reason BundleTooLarge)")
	f.IntVar(&wb.Attempts, "bundle-fetch-attempts", wb.Attempts, "requests one bundle fetch makes at most; network errors, 5xx, 408 and 429 are retried with exponential backoff, other 4xx, TLS and checksum failures are not")
	f.StringVar(&wb.CacheDir, "bundle-cache-dir", wb.CacheDir, "directory that keeps each policy's last good bundle across restarts (mount a volume); empty keeps them in memory only")
	f.Int64Var(&wb.CacheMaxBytes, "bundle-cache-max-bytes", wb.CacheMaxBytes, "bytes of bundles --bundle-cache-dir may hold; past it a bundle is enforced but not persisted")
	f.StringVar(&wb.PublishBucket, "bundle-publish-bucket", wb.PublishBucket, "publish every RuleSet's cached revision to this bucket of --bundle-storage-url and report it in status.bundle; empty publishes nothing")
	f.StringVar(&wb.PublishPrefix, "bundle-publish-prefix", wb.PublishPrefix, "object key prefix of published bundles (ends with /); keys are PREFIX<namespace>/<name>/<sha256>.json")

	g := &cfg.APIGatewayOptions
	f.BoolVar(&cfg.APIGateway, "apigateway", cfg.APIGateway, "run the API exposure layer: APIGateway, APIRule and RateLimit generating Istio configuration (L7; needs Istio's CRDs)")
	f.StringVar(&g.IngressPrincipal, "apigateway-ingress-principal", g.IngressPrincipal, "SPIFFE identity of the Istio ingress gateway, the only caller the AuthorizationPolicies generated for APIRules allow")
	f.DurationVar(&g.APIRuleResync, "apigateway-apirule-resync", g.APIRuleResync, "reconcile unchanged APIRules this often, repairing hand edits of their Istio objects")
	f.DurationVar(&g.RateLimitResync, "apigateway-ratelimit-resync", g.RateLimitResync, "reconcile unchanged RateLimits this often")
	f.DurationVar(&g.GatewayResync, "apigateway-gateway-resync", g.GatewayResync, "reconcile the unchanged APIGateway this often")

	// Names Portal used before it followed controller-runtime's and kubectl's.
	for old, name := range map[string]string{
		"metrics-addr":      "metrics-bind-address",
		"health-addr":       "health-probe-bind-address",
		"cache-max-age":     "waf-cache-max-age",
		"cache-max-size":    "waf-cache-max-size",
		"cache-gc-interval": "waf-cache-gc-interval",
	} {
		deprecatedAlias(f, old, name)
	}
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, errors.New("--log-level: use debug, info, warn or error")
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

// checkActionsFlags rejects response-action settings that cannot work.
func checkActionsFlags(a *manager.ActionsConfig) error {
	for _, t := range a.Types {
		if !slices.Contains(actions.Types(), t) {
			return fmt.Errorf("--actions-enabled: %q is not one of %s", t, strings.Join(actions.Types(), ", "))
		}
	}
	if _, err := actions.ParseRateLimit(a.DefaultRateLimit); err != nil {
		return fmt.Errorf("--actions-default-rate-limit: %w", err)
	}
	if a.Workers <= 0 || a.QueueSize <= 0 || a.CacheSize <= 0 {
		return fmt.Errorf("--actions-workers (%d), --actions-queue-size (%d) and --actions-cache-size (%d) must be positive", a.Workers, a.QueueSize, a.CacheSize)
	}
	return nil
}
