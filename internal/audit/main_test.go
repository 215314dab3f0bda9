package audit_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	openreportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

// The control plane is shared by the tests of this package and started on
// first use.
var (
	envOnce sync.Once
	env     struct {
		cfg    *rest.Config
		client client.Client
		err    error
		stop   func() error
	}
	amOnce   sync.Once
	sharedAM *amtest.Server
	amErr    error
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.FromSlogHandler(testLogger().Handler()))
	klog.SetLogger(logr.FromSlogHandler(testLogger().Handler()))
	code := m.Run()
	if sharedAM != nil {
		sharedAM.Stop()
	}
	if env.stop != nil {
		if err := env.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, policyv1alpha1.AddToScheme, reportsv1alpha2.AddToScheme, openreportsv1alpha1.Install} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// cluster starts the shared control plane once and returns a client for it.
func cluster(t *testing.T) client.Client {
	t.Helper()
	envOnce.Do(func() {
		crds, err := crdPaths()
		if err != nil {
			env.err = err
			return
		}
		cl, err := devcluster.Start(context.Background(), devcluster.Options{CRDDirectoryPaths: crds})
		if err != nil {
			env.err = err
			return
		}
		env.stop = cl.Stop
		env.cfg = rest.CopyConfig(cl.Config)
		// The tests create thousands of pods: no client-side throttling.
		env.cfg.QPS, env.cfg.Burst = 1000, 2000
		env.client, env.err = client.New(env.cfg, client.Options{Scheme: scheme()})
	})
	if env.err != nil {
		t.Fatal(env.err)
	}
	return env.client
}

// crdPaths are Portal's CRDs and the OpenReports CRDs, read from the
// openreports module as ARCHITECTURE.md says.
func crdPaths() ([]string, error) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/openreports/reports-api")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("locate the openreports module: %w", err)
	}
	return []string{filepath.Join(root, "deploy", "crds"), filepath.Join(strings.TrimSpace(string(out)), "config", "crd")}, nil
}

// namespace creates a namespace with a random name for one test.
func namespace(t *testing.T, c client.Client, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return name
}

// shared returns the Alertmanager the tests share.
func shared(t *testing.T) *amtest.Server {
	t.Helper()
	amOnce.Do(func() {
		dir, err := os.MkdirTemp("", "portal-am-")
		if err != nil {
			amErr = err
			return
		}
		sharedAM, amErr = amtest.New(dir)
	})
	if amErr != nil {
		t.Fatal(amErr)
	}
	return sharedAM
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 25*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond() })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// testLogger discards logs unless PORTAL_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("PORTAL_TEST_LOG") != "" {
		return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// metric sums the values of the series of name in reg whose labels include
// match.
func metric(t *testing.T, reg *prometheus.Registry, name string, match map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for k, v := range match {
				if labelValue(m, k) != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// mgrOptions are the manager options of one test instance.
func mgrOptions(leaderID string) ctrl.Options {
	o := ctrl.Options{
		Scheme:                 scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
	if leaderID != "" {
		o.LeaderElection = true
		o.LeaderElectionID = leaderID
		o.LeaderElectionNamespace = "default"
		o.LeaderElectionReleaseOnCancel = true
	}
	return o
}

// waitDone waits for a manager to return after its context was cancelled.
func waitDone(done <-chan error) error {
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "leader election lost") {
			return err
		}
		return nil
	case <-time.After(30 * time.Second):
		buf := make([]byte, 1<<22)
		n := goruntime.Stack(buf, true)
		return fmt.Errorf("manager did not stop within 30s; goroutines:\n%s", buf[:n])
	}
}
