//go:build linux

package admission_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	portaladmission "github.com/vilaca/portal/internal/admission"
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

func startPortal(ctx context.Context, b *testing.B, cluster *devcluster.Cluster) (*portalProcess, error) {
	dir := b.TempDir()
	kc, err := cluster.Kubeconfig()
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	var ports [3]int
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
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[1]),
		readyzURL:  fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[2]),
		exited:     make(chan struct{}),
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
		childWebhookEnv+"="+strconv.Itoa(ports[0]),
		childMetricsEnv+"="+fmt.Sprintf("127.0.0.1:%d", ports[1]),
		childHealthEnv+"="+fmt.Sprintf("127.0.0.1:%d", ports[2]),
	)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// The child dies with the benchmark, however that ends.
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

// waitReady waits until Portal is ready, every rule is loaded, and Portal's
// webhook configuration covers Pods with a CA bundle.
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
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := cl.Get(ctx, client.ObjectKey{Name: portaladmission.ConfigName}, &vwc); err != nil {
			last = "webhook configuration: " + err.Error()
			return false, client.IgnoreNotFound(err)
		}
		for _, w := range vwc.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				continue
			}
			for _, r := range w.Rules {
				if slices.Contains(r.Resources, "pods") {
					return true, nil
				}
			}
		}
		last = "webhook configuration without pods or CA bundle"
		return false, nil
	})
	if err != nil {
		return errors.Join(fmt.Errorf("waiting for portal (%s): %w", last, err), p.logTail())
	}
	return nil
}
