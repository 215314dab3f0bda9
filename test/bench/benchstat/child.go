//go:build linux

package benchstat

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

	"github.com/go-logr/logr"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/freeport"
)

// Child is Portal running in a child process of a benchmark: the
// benchmark's own test binary started again with an environment its
// TestMain recognises, so Portal's memory can be read on its own from
// /proc/<pid>/status, without the benchmark's clients in it.
type Child struct {
	Cmd        *exec.Cmd
	LogPath    string
	MetricsURL string
	ReadyzURL  string
	exited     chan struct{}
	stopOnce   sync.Once
}

// ChildSetup is what a benchmark's environment for its child is built from:
// the kubeconfig file of the control plane, free addresses of 127.0.0.1 for
// Portal's /metrics and /healthz, /readyz, and one more free port of
// 127.0.0.1, distinct from those two, for a listener of the benchmark's own
// (the admission webhook).
type ChildSetup struct {
	Kubeconfig  string
	MetricsAddr string
	HealthAddr  string
	SparePort   int
}

// StartChild writes cluster's kubeconfig into dir and starts the running
// test binary again, with env(setup) added to its environment. The child's
// output goes to logPath (empty: dir/portal.log), and it dies with the
// benchmark, however that ends.
func StartChild(dir, logPath string, cluster *devcluster.Cluster, env func(ChildSetup) []string) (*Child, error) {
	kc, err := cluster.Kubeconfig()
	if err != nil {
		return nil, err
	}
	setup := ChildSetup{Kubeconfig: filepath.Join(dir, "kubeconfig")}
	if err := os.WriteFile(setup.Kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	ports, err := freeport.PickN("127.0.0.1", 3)
	if err != nil {
		return nil, err
	}
	setup.MetricsAddr, setup.HealthAddr = fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	setup.SparePort = ports[2]
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if logPath == "" {
		logPath = filepath.Join(dir, "portal.log")
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), env(setup)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return StartCommand(cmd, logFile, "http://"+setup.MetricsAddr+"/metrics", "http://"+setup.HealthAddr+"/readyz")
}

// StartCommand starts cmd, whose output goes to logFile, as a Child that
// serves /metrics at metricsURL and /readyz at readyzURL; logFile is closed
// when cmd exits.
func StartCommand(cmd *exec.Cmd, logFile *os.File, metricsURL, readyzURL string) (*Child, error) {
	c := &Child{Cmd: cmd, LogPath: logFile.Name(), MetricsURL: metricsURL, ReadyzURL: readyzURL, exited: make(chan struct{})}
	if err := c.Cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() {
		_ = c.Cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	return c, nil
}

// Pid is the child's process ID.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Stop asks Portal to shut down (SIGTERM) and kills it after 15 s.
func (c *Child) Stop() {
	c.stopOnce.Do(func() {
		_ = c.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(15 * time.Second):
			_ = c.Cmd.Process.Kill()
			<-c.exited
		}
	})
}

// LogTail is the end of Portal's log, as an error to join to the one that
// made the benchmark stop.
func (c *Child) LogTail() error {
	data, err := os.ReadFile(c.LogPath)
	if err != nil {
		return err
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return fmt.Errorf("portal log (tail):\n%s", data)
}

// Scrape reads Portal's /metrics.
func (c *Child) Scrape(ctx context.Context) (Metrics, error) {
	code, body, err := HTTPGet(ctx, c.MetricsURL)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("portal /metrics: HTTP %d", code)
	}
	return ParseMetrics(string(body)), nil
}

// WaitReady waits until Portal answers /readyz, nRules PortalClusterRules
// are Ready, and ready says the benchmark's own condition holds (or, when
// not, what it waits for).
func (c *Child) WaitReady(ctx context.Context, cl client.Client, nRules int, ready func(context.Context) (ok bool, waitingFor string, err error)) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-c.exited:
			return false, errors.New("portal exited")
		default:
		}
		if code, _, err := HTTPGet(ctx, c.ReadyzURL); err != nil || code != http.StatusOK {
			last = fmt.Sprintf("/readyz: %d %v", code, err)
			return false, nil
		}
		var rules policyv1alpha1.PortalClusterRuleList
		if err := cl.List(ctx, &rules); err != nil {
			return false, err
		}
		n := 0
		for _, r := range rules.Items {
			if apimeta.IsStatusConditionTrue(r.Status.Conditions, policyv1alpha1.ConditionReady) {
				n++
			}
		}
		if n != nRules {
			last = fmt.Sprintf("%d of %d rules ready", n, nRules)
			return false, nil
		}
		ok, waitingFor, err := ready(ctx)
		last = waitingFor
		return ok, err
	})
	if err != nil {
		return errors.Join(fmt.Errorf("waiting for portal (%s): %w", last, err), c.LogTail())
	}
	return nil
}

// Main is a benchmark package's TestMain: in the child (childEnv set) it
// runs Portal with child and exits; otherwise it runs the tests and
// benchmarks with controller-runtime's logs discarded.
func Main(m *testing.M, childEnv string, child func() error) {
	if os.Getenv(childEnv) != "" {
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "portal (benchmark child):", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	ctrl.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
