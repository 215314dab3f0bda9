//go:build linux

package audit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
)

// portalProcess is Portal running in a child process of the benchmark, so
// its memory can be read on its own.
type portalProcess struct {
	cmd        *exec.Cmd
	logPath    string
	metricsURL string
	readyzURL  string
	exited     chan struct{}
	stopOnce   sync.Once
}

func startPortal(b *testing.B, cluster *devcluster.Cluster, amURL string) (*portalProcess, error) {
	dir := b.TempDir()
	kc, err := cluster.Kubeconfig()
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	var ports [2]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &portalProcess{
		logPath:    filepath.Join(dir, "portal.log"),
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]),
		readyzURL:  fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]),
		exited:     make(chan struct{}),
	}
	// PORTAL_BENCH_AUDIT_LOG keeps Portal's log after the run.
	if path := os.Getenv("PORTAL_BENCH_AUDIT_LOG"); path != "" {
		p.logPath = path
	}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(self)
	p.cmd.Env = append(os.Environ(),
		childEnv+"=1",
		childKubeconfigEnv+"="+kubeconfig,
		childNamespaceEnv+"="+portalNamespace,
		childMetricsEnv+"="+fmt.Sprintf("127.0.0.1:%d", ports[0]),
		childHealthEnv+"="+fmt.Sprintf("127.0.0.1:%d", ports[1]),
		childAlertmanager+"="+amURL,
	)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() {
		_ = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// stop asks Portal to shut down (SIGTERM) and kills it after 15 s.
func (p *portalProcess) stop() {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

// logTail is the end of Portal's log, for errors.
func (p *portalProcess) logTail() error {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return fmt.Errorf("portal log (tail):\n%s", data)
}

func (p *portalProcess) scrape(ctx context.Context) (metrics, error) {
	code, body, err := httpGet(ctx, p.metricsURL)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("portal /metrics: HTTP %d", code)
	}
	return parseMetrics(string(body)), nil
}

// waitReady waits until Portal is ready, every rule is loaded and the audit
// layer watches at least one resource and leads.
func (p *portalProcess) waitReady(ctx context.Context, cl client.Client, nRules int) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, errors.New("portal exited")
		default:
		}
		if code, _, err := httpGet(ctx, p.readyzURL); err != nil || code != http.StatusOK {
			last = fmt.Sprintf("/readyz: %d %v", code, err)
			return false, nil
		}
		var rules policyv1alpha1.PortalClusterRuleList
		if err := cl.List(ctx, &rules); err != nil {
			return false, err
		}
		ready := 0
		for _, r := range rules.Items {
			if apimeta.IsStatusConditionTrue(r.Status.Conditions, policyv1alpha1.ConditionReady) {
				ready++
			}
		}
		if ready != nRules {
			last = fmt.Sprintf("%d of %d rules ready", ready, nRules)
			return false, nil
		}
		m, err := p.scrape(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if m.Sum("portal_audit_watched_resources") < 1 || m.Sum("portal_audit_leader") != 1 {
			last = fmt.Sprintf("audit: %v resources watched, leader %v", m.Sum("portal_audit_watched_resources"), m.Sum("portal_audit_leader"))
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("waiting for portal (%s): %w", last, err), p.logTail())
	}
	return nil
}

// heapProfile has the child write its heap profile, when
// PORTAL_BENCH_AUDIT_HEAPPROFILE names the file, and waits for it.
func (p *portalProcess) heapProfile(ctx context.Context) error {
	path := os.Getenv(heapProfileEnv)
	if path == "" {
		return nil
	}
	_ = os.Remove(path)
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
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
