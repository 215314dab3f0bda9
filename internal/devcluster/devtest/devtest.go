// Package devtest holds what the integration tests of every layer share: one
// real control plane per test binary, started on first use, and polling with
// a deadline.
package devtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vilaca/portal/internal/devcluster"
)

// Eventually polls cond every 20 ms until it holds, and fails the test when
// 30 seconds pass first.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Update applies change to the latest version of obj and updates it, again
// on a conflict: Portal writes the status of what it reconciles, and the
// API server's own controllers write some objects (a CRD's conditions), so
// an object read a moment ago may be stale by the time it is updated. obj
// holds what the API server stored after.
func Update(t testing.TB, c client.Client, obj client.Object, change func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return c.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("update %s %s: %v", obj.GetObjectKind().GroupVersionKind().Kind, client.ObjectKeyFromObject(obj), err)
	}
}

// Shared is one control plane for the tests of a package, started by the
// first test that asks for it, so unit tests and fuzz targets in the same
// package do not pay for it. Declare one per package and call Main from
// TestMain. With Options.Node it is also the package's one node: give each
// test its own Namespace.
type Shared struct {
	// Options start the control plane.
	Options devcluster.Options
	// Setup, when set, runs once after the control plane is up (start a
	// manager, create fixtures). The stop function it returns runs before
	// the control plane stops.
	Setup func(*devcluster.Cluster) (stop func() error, err error)

	once    sync.Once
	cluster *devcluster.Cluster
	stop    func() error
	err     error
}

// Cluster returns the running control plane, starting it on first use.
func (s *Shared) Cluster(t testing.TB) *devcluster.Cluster {
	t.Helper()
	s.once.Do(s.start)
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.cluster
}

func (s *Shared) start() {
	s.cluster, s.err = devcluster.Start(context.Background(), s.Options)
	if s.err != nil || s.Setup == nil {
		return
	}
	s.stop, s.err = s.Setup(s.cluster)
}

// Main runs the tests and then stops whatever was started.
func (s *Shared) Main(m *testing.M) {
	code := m.Run()
	var errs []error
	if s.stop != nil {
		errs = append(errs, s.stop())
	}
	if s.cluster != nil {
		errs = append(errs, s.cluster.Stop())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "stop control plane:", err)
		code = 1
	}
	os.Exit(code)
}

// NewManager returns a manager for tests: no metrics or health listeners,
// no leader election, and controller names that may repeat across the
// managers of one test binary.
func NewManager(cl *devcluster.Cluster, scheme *runtime.Scheme) (ctrl.Manager, error) {
	return ctrl.NewManager(cl.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
}

// Run starts mgr in the background and returns the function that stops it
// and reports its error.
func Run(mgr ctrl.Manager) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// Namespace creates a namespace for the calling test (its name derived
// from the test's), waits for its default ServiceAccount, which pods need
// on a cluster with a node (Options.Node), and deletes it when the test
// ends. Tests that share a node keep apart this way.
func Namespace(t testing.TB, cl *devcluster.Cluster) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cl.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: namespacePrefix(t.Name())}}
	ns, err = cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the test's namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	if cl.HasNode() {
		Eventually(t, "the default ServiceAccount of "+ns.Name, func() bool {
			_, err := cs.CoreV1().ServiceAccounts(ns.Name).Get(context.Background(), "default", metav1.GetOptions{})
			return err == nil
		})
	}
	return ns.Name
}

// namespacePrefix turns a test name into a namespace name prefix: lower
// case letters, digits and dashes, short enough for the random suffix.
func namespacePrefix(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	p := strings.Trim(b.String(), "-")
	if len(p) > 40 {
		p = strings.TrimRight(p[:40], "-")
	}
	if p == "" {
		p = "test"
	}
	return p + "-"
}
