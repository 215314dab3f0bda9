//go:build linux

package audit_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/test/bench/benchstat"
)

// startPortal runs Portal in a child process (see main_test.go), sending
// alerts to amURL. PORTAL_BENCH_AUDIT_LOG keeps Portal's log after the run.
func startPortal(b *testing.B, cluster *devcluster.Cluster, amURL string) (*benchstat.Child, error) {
	return benchstat.StartChild(b.TempDir(), os.Getenv("PORTAL_BENCH_AUDIT_LOG"), cluster, func(s benchstat.ChildSetup) []string {
		return []string{
			childEnv + "=1",
			childKubeconfigEnv + "=" + s.Kubeconfig,
			childNamespaceEnv + "=" + portalNamespace,
			childMetricsEnv + "=" + s.MetricsAddr,
			childHealthEnv + "=" + s.HealthAddr,
			childAlertmanager + "=" + amURL,
		}
	})
}

// auditLeads is the benchmark's readiness condition: the audit layer watches
// at least one resource and leads, with every sink publishing.
func auditLeads(portal *benchstat.Child) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		m, err := portal.Scrape(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		if m.Sum("portal_audit_watched_resources") < 1 || m.Sum("portal_audit_leader") != 1 {
			return false, fmt.Sprintf("audit: %v resources watched, leader %v", m.Sum("portal_audit_watched_resources"), m.Sum("portal_audit_leader")), nil
		}
		return true, "", nil
	}
}

// heapProfile has the child write its heap profile, when
// PORTAL_BENCH_AUDIT_HEAPPROFILE names the file, and waits for it.
func heapProfile(ctx context.Context, portal *benchstat.Child) error {
	path := os.Getenv(heapProfileEnv)
	if path == "" {
		return nil
	}
	_ = os.Remove(path)
	if err := portal.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("heap profile %s not written: %w", path, err)
	}
	fmt.Printf("bench-audit: heap profile written to %s\n", path)
	return nil
}
