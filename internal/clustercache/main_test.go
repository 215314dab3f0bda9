package clustercache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

var shared = devtest.Shared{Options: devcluster.Options{CRDDirectoryPaths: []string{}}}

func TestMain(m *testing.M) { shared.Main(m) }

// startCache runs a cache on cfg (the shared cluster's admin config when
// nil) until the test ends.
func startCache(t *testing.T, cfg *rest.Config) (*Cache, *prometheus.Registry) {
	t.Helper()
	cl := shared.Cluster(t)
	if cfg == nil {
		cfg = cl.Config
	}
	hc, err := rest.HTTPClientFor(cl.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cl.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c, err := New(cfg, mapper, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return c, reg
}

func clientset(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(shared.Cluster(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// namespace creates a namespace with a random name for one test.
func namespace(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	_, err := clientset(t).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func createConfigMap(t *testing.T, ns, name string, labels map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm, err := clientset(t).CoreV1().ConfigMaps(ns).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"k": name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func waitSynced(t *testing.T, h *Handle) {
	t.Helper()
	if err := h.WaitSynced(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// requestCounter counts the watch requests a client config makes.
type requestCounter struct {
	next http.RoundTripper
	fn   func(*http.Request)
}

func (r *requestCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	r.fn(req)
	return r.next.RoundTrip(req)
}
