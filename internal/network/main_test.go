package network_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/network"
	amsink "github.com/vilaca/portal/internal/sink/alertmanager"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
	"github.com/vilaca/portal/internal/sink/policyreport"
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
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.FromSlogHandler(testLogger().Handler()))
	klog.SetLogger(logr.FromSlogHandler(testLogger().Handler()))
	code := m.Run()
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
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, reportsv1alpha2.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// cluster starts the shared control plane once and returns a client for it.
func cluster(t testing.TB) client.Client {
	t.Helper()
	envOnce.Do(func() {
		root, err := devcluster.RepoRoot()
		if err != nil {
			env.err = err
			return
		}
		cl, err := devcluster.Start(context.Background(), devcluster.Options{CRDDirectoryPaths: []string{filepath.Join(root, "deploy", "crds")}})
		if err != nil {
			env.err = err
			return
		}
		env.stop = cl.Stop
		env.cfg = rest.CopyConfig(cl.Config)
		env.cfg.QPS, env.cfg.Burst = 2000, 4000
		env.client, env.err = client.New(env.cfg, client.Options{Scheme: scheme()})
	})
	if env.err != nil {
		t.Fatal(env.err)
	}
	return env.client
}

func testLogger() *slog.Logger {
	if os.Getenv("PORTAL_TEST_LOG") != "" {
		return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// instance is the network layer as `portal run --network` assembles it: the
// shared cluster cache, the findings pipeline with the report and alert
// sinks, the analyser, on a manager and metrics registry of its own.
type instance struct {
	reg      *prometheus.Registry
	pipe     *findings.Pipeline
	analyser *network.Analyser
	cancel   context.CancelFunc
	done     chan error
}

func start(t testing.TB, am *amtest.Server, cfg network.Config) *instance {
	t.Helper()
	return startWith(t, am, cfg)
}

// startWith is start with more sinks.
func startWith(t testing.TB, am *amtest.Server, cfg network.Config, extra ...core.OutputSink) *instance {
	t.Helper()
	return startOpts(t, am, network.Options{Config: cfg}, extra...)
}

// startOpts is startWith with the analyser's options (Config, Clock,
// ResyncPeriod, ...); the instance sets its cache, pipeline, logger and
// registry.
func startOpts(t testing.TB, am *amtest.Server, o network.Options, extra ...core.OutputSink) *instance {
	t.Helper()
	cluster(t)
	log := testLogger()
	mgr, err := ctrl.NewManager(env.cfg, ctrl.Options{
		Scheme: scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pr, err := policyreport.New(policyreport.Options{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Format: policyreport.FormatWGPolicy, Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	sinks := append([]core.OutputSink{pr}, extra...)
	if am != nil {
		s, err := amsink.New(amsink.Options{URL: am.URL(), MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, Logger: log, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		sinks = append(sinks, s)
	}
	pipe, err := findings.New(mgr, findings.Options{Sinks: sinks, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := clustercache.New(mgr.GetConfig(), mgr.GetRESTMapper(), clustercache.Options{Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(cc); err != nil {
		t.Fatal(err)
	}
	o.Cache, o.Findings, o.Logger, o.Registerer = cc, pipe, log, reg
	a, err := network.Setup(mgr, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inst := &instance{reg: reg, pipe: pipe, analyser: a, cancel: cancel, done: make(chan error, 1)}
	go func() { inst.done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-inst.done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("manager did not stop within 30s")
		}
	})
	select {
	case <-a.Synced():
	case err := <-inst.done:
		t.Fatalf("manager stopped before the analyser synced: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("analyser not synced within a minute")
	}
	return inst
}

// counter is the value of a counter or gauge of the instance's registry.
func (i *instance) counter(t testing.TB, name string) float64 {
	t.Helper()
	mfs, err := i.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// namespace creates a namespace with a random name.
func namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

func pod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}},
	}
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true,
		func(context.Context) (bool, error) { return cond() })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// reported lists "rule Kind/name" of the results of the namespace's
// PolicyReports and, for the namespace itself, the ClusterPolicyReports.
func reported(c client.Client, ns string) (map[string]string, error) {
	ctx := context.Background()
	out := map[string]string{}
	var prs reportsv1alpha2.PolicyReportList
	if err := c.List(ctx, &prs, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var results []reportsv1alpha2.PolicyReportResult
	for _, r := range prs.Items {
		results = append(results, r.Results...)
	}
	var cprs reportsv1alpha2.ClusterPolicyReportList
	if err := c.List(ctx, &cprs); err != nil {
		return nil, err
	}
	for _, r := range cprs.Items {
		for _, res := range r.Results {
			if len(res.Resources) == 1 && res.Resources[0].Kind == "Namespace" && res.Resources[0].Name == ns {
				results = append(results, res)
			}
		}
	}
	for _, res := range results {
		if res.Source != "portal-network" || len(res.Resources) != 1 {
			continue
		}
		out[res.Policy+" "+res.Resources[0].Kind+"/"+res.Resources[0].Name] = res.Message
	}
	return out, nil
}

// waitReported waits until the namespace's reports hold key (want) or do
// not (!want).
func waitReported(t testing.TB, c client.Client, ns, key string, want bool) {
	t.Helper()
	what := "report to hold " + key
	if !want {
		what = "report to drop " + key
	}
	eventually(t, 20*time.Second, what, func() (bool, error) {
		got, err := reported(c, ns)
		if err != nil {
			return false, nil
		}
		_, ok := got[key]
		return ok == want, nil
	})
}
