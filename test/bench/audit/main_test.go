//go:build linux

package audit_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
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
// Without childEnv, TestMain starts nothing: it only runs the tests (none)
// and, with -bench, the benchmark.
const (
	childEnv           = "PORTAL_BENCH_AUDIT_CHILD"
	childKubeconfigEnv = "PORTAL_BENCH_KUBECONFIG"
	childNamespaceEnv  = "PORTAL_BENCH_NAMESPACE"
	childMetricsEnv    = "PORTAL_BENCH_METRICS_ADDR"
	childHealthEnv     = "PORTAL_BENCH_HEALTH_ADDR"
	childAlertmanager  = "PORTAL_BENCH_ALERTMANAGER_URL"
	// heapProfileEnv names a file: once the findings settled, the
	// benchmark sends the child SIGUSR1 and the child writes its heap
	// profile there (go tool pprof reads it). Unset: no profile.
	heapProfileEnv = "PORTAL_BENCH_AUDIT_HEAPPROFILE"
	// cpuProfileEnv names a file for the child's CPU profile, from start
	// to stop. Unset: no profile.
	cpuProfileEnv = "PORTAL_BENCH_AUDIT_CPUPROFILE"
	// reportMaxResultsEnv sets Portal's --report-max-results (unset: the
	// default).
	reportMaxResultsEnv = "PORTAL_BENCH_AUDIT_REPORT_MAX_RESULTS"
)

func TestMain(m *testing.M) { benchstat.Main(m, childEnv, runPortal) }

// runPortal is the child: `portal run --audit --admission=false
// --alertmanager-url <url> --leader-elect=false` with the defaults of
// `portal run` otherwise (sinks: wgpolicyk8s PolicyReports, the Prometheus
// gauge and the JSON finding log, plus Alertmanager; WAF off). Rules come
// from the PortalClusterRule objects the benchmark creates.
func runPortal() error {
	restCfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(childKubeconfigEnv))
	if err != nil {
		return err
	}
	cfg := manager.Defaults()
	cfg.Namespace = os.Getenv(childNamespaceEnv)
	cfg.MetricsAddr = os.Getenv(childMetricsEnv)
	// Plain HTTP (--metrics-secure=false): the benchmark scrapes without a
	// token, and measures Portal rather than TokenReviews.
	cfg.MetricsSecure = false
	cfg.HealthAddr = os.Getenv(childHealthEnv)
	cfg.Admission.Enabled = false
	cfg.Audit.Enabled = true
	if err := cfg.Sinks.Parse("--alertmanager-url=" + os.Getenv(childAlertmanager)); err != nil {
		return err
	}
	// --report-max-results, to compare shard sizes.
	if v := os.Getenv(reportMaxResultsEnv); v != "" {
		if err := cfg.Sinks.Parse("--report-max-results=" + v); err != nil {
			return fmt.Errorf("%s: %w", reportMaxResultsEnv, err)
		}
	}
	// One replica: no leader election, as in `portal dev`.
	cfg.LeaderElection = false
	// `portal run --log-level info`, the default, JSON on stderr.
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if path := os.Getenv(heapProfileEnv); path != "" {
		go writeHeapProfileOnSignal(ctx, path)
	}
	if path := os.Getenv(cpuProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	err = manager.Run(ctx, restCfg, cfg)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// writeHeapProfileOnSignal writes the heap profile to path on SIGUSR1.
func writeHeapProfileOnSignal(ctx context.Context, path string) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Stop(sig)
	select {
	case <-sig:
	case <-ctx.Done():
		return
	}
	runtime.GC()
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "heap profile:", err)
		return
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "heap profile:", err)
	}
	f.Close()
	if err := os.Rename(tmp, path); err != nil {
		fmt.Fprintln(os.Stderr, "heap profile:", err)
	}
}
