//go:build linux

package admission_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/test/bench/benchstat"
)

// The benchmark runs Portal in a child process, so that Portal's memory can be
// read from /proc/<pid>/status without the benchmark's clients in it. The child
// is this test binary started again with childEnv set: TestMain then runs
// manager.Run, the function `portal run` calls, instead of the benchmark.
const (
	childEnv           = "PORTAL_BENCH_ADMISSION_CHILD"
	childKubeconfigEnv = "PORTAL_BENCH_KUBECONFIG"
	childNamespaceEnv  = "PORTAL_BENCH_NAMESPACE"
	childWebhookEnv    = "PORTAL_BENCH_WEBHOOK_PORT"
	childMetricsEnv    = "PORTAL_BENCH_METRICS_ADDR"
	childHealthEnv     = "PORTAL_BENCH_HEALTH_ADDR"
)

func TestMain(m *testing.M) { benchstat.Main(m, childEnv, runPortal) }

// runPortal is the child: `portal run --admission --leader-elect=false` with
// the defaults of `portal run` (WAF off), except that the webhook listens
// on 127.0.0.1 and the webhook configuration points the API server at
// https://127.0.0.1:<port> (AdmissionConfig.LocalURL, which only `portal dev`
// sets today: `portal run` has no flag for it). Rules come from the
// PortalClusterRule objects the benchmark creates.
func runPortal() error {
	restCfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(childKubeconfigEnv))
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(os.Getenv(childWebhookEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", childWebhookEnv, err)
	}
	cfg := manager.Defaults()
	cfg.Namespace = os.Getenv(childNamespaceEnv)
	cfg.MetricsAddr = os.Getenv(childMetricsEnv)
	// Plain HTTP (--metrics-secure=false): the benchmark scrapes without a
	// token, and measures Portal rather than TokenReviews.
	cfg.MetricsSecure = false
	cfg.HealthAddr = os.Getenv(childHealthEnv)
	// PORTAL_BENCH_PPROF_ADDR serves Portal's /debug/pprof/ there, to
	// profile the webhook under the benchmark's load.
	cfg.PprofAddr = os.Getenv("PORTAL_BENCH_PPROF_ADDR")
	cfg.Admission.Enabled = true
	cfg.Admission.Host = "127.0.0.1"
	cfg.Admission.Port = port
	cfg.Admission.LocalURL = true
	// One replica: no leader election, as in `portal dev`. On this shared
	// machine a lease renewal can miss its deadline under load, and a
	// manager that loses the lease exits.
	cfg.LeaderElection = false
	// `portal run --log-level info`, the default, JSON on stderr.
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = manager.Run(ctx, restCfg, cfg)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
