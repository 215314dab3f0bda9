package devcluster

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestStartCreateStop runs the real control plane from bin/k8s (or $KUBEBUILDER_ASSETS):
// it fails, never skips, when `make tools` has not been run.
func TestStartCreateStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	c, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()

	for _, name := range Binaries {
		if _, err := os.Stat(filepath.Join(c.BinaryDir(), name)); err != nil {
			t.Errorf("BinaryDir %s: %v", c.BinaryDir(), err)
		}
	}

	ns := createThroughConfig(ctx, t, c)
	readBackThroughKubeconfig(ctx, t, c, ns)
	checkCRDsInstalled(ctx, t, c)

	apiAddr := hostPort(t, c.Config.Host)
	etcdAddr := c.env.ControlPlane.Etcd.URL.Host
	for name, addr := range map[string]string{"kube-apiserver": apiAddr, "etcd": etcdAddr} {
		if !accepts(addr) {
			t.Fatalf("%s at %s does not accept connections while running", name, addr)
		}
	}

	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// Stop waits for both processes to exit, so their ports close; poll with a deadline
	// rather than assume it.
	for name, addr := range map[string]string{"kube-apiserver": apiAddr, "etcd": etcdAddr} {
		if err := waitClosed(addr, 30*time.Second); err != nil {
			t.Errorf("%s after Stop: %v", name, err)
		}
	}
}

// createThroughConfig creates a labelled namespace through c.Config.
func createThroughConfig(ctx context.Context, t *testing.T, c *Cluster) *corev1.Namespace {
	t.Helper()
	// Through Config.
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   "devcluster-test",
		Labels: map[string]string{"portal.test/owner": "devcluster"},
	}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns
}

// readBackThroughKubeconfig reads ns back through c's kubeconfig file, as
// kubectl or portal would.
func readBackThroughKubeconfig(ctx context.Context, t *testing.T, c *Cluster, ns *corev1.Namespace) {
	t.Helper()
	// Read it back through the kubeconfig file, as kubectl or `portal` would.
	kubeconfig, err := c.Kubeconfig()
	if err != nil {
		t.Fatalf("Kubeconfig: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	fileCfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	if strings.TrimSuffix(fileCfg.Host, "/") != strings.TrimSuffix(c.Config.Host, "/") {
		t.Errorf("kubeconfig server %q, Config.Host %q", fileCfg.Host, c.Config.Host)
	}
	fileCS, err := kubernetes.NewForConfig(fileCfg)
	if err != nil {
		t.Fatalf("clientset from kubeconfig: %v", err)
	}
	got, err := fileCS.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get namespace: %v", err)
	}
	if got.Labels["portal.test/owner"] != "devcluster" || got.UID == "" {
		t.Errorf("namespace read back = %+v", got.ObjectMeta)
	}
}

// checkCRDsInstalled checks that the CRDs of <repo>/deploy/crds (the
// default) are installed.
func checkCRDsInstalled(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	// The CRDs of <repo>/deploy/crds (the default) are installed and established.
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	crdFiles, _ := filepath.Glob(filepath.Join(root, "deploy", "crds", "*.yaml"))
	if len(c.env.CRDs) != len(crdFiles) {
		t.Errorf("installed %d CRDs, deploy/crds has %d files", len(c.env.CRDs), len(crdFiles))
	}
	xcs, err := apiextensionsclient.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range c.env.CRDs {
		if _, err := xcs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("CRD %s: %v", crd.Name, err)
		}
	}
}

func TestMissingBinaries(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(context.Background(), Options{BinaryDir: dir})
	if err == nil {
		t.Fatal("Start with an empty binary directory succeeded")
	}
	want := "kube-apiserver not found in " + dir + ": run `make tools`"
	if err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	var mb *MissingBinaryError
	if !errors.As(err, &mb) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v is not a *MissingBinaryError wrapping fs.ErrNotExist", err)
	}

	// etcd missing while kube-apiserver is there.
	if err := os.WriteFile(filepath.Join(dir, "kube-apiserver"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Options{BinaryDir: dir})
	if err == nil || !strings.HasPrefix(err.Error(), "etcd not found in "+dir) {
		t.Errorf("error = %v, want etcd not found", err)
	}
}

func TestCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Start(ctx, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a canceled context: %v", err)
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Dir(filepath.Dir(wd)); root != want {
		t.Errorf("RepoRoot() = %s, want %s", root, want)
	}
}

func TestModulePath(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ gomod, want string }{
		{"module github.com/vilaca/portal\n\ngo 1.26\n", ModulePath},
		{"// comment\nmodule \"github.com/vilaca/portal\" // trailing\n", ModulePath},
		{"module github.com/vilaca/portal/hack/tools\n", "github.com/vilaca/portal/hack/tools"},
		{"modules x\n", ""},
	} {
		path := filepath.Join(dir, "go.mod")
		if err := os.WriteFile(path, []byte(tc.gomod), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := modulePath(path)
		if tc.want == "" {
			if err == nil {
				t.Errorf("modulePath(%q) = %q, want an error", tc.gomod, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("modulePath(%q) = %q, %v; want %q", tc.gomod, got, err, tc.want)
		}
	}
}

func hostPort(t *testing.T, host string) string {
	t.Helper()
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		t.Fatalf("Config.Host %q: %v", host, err)
	}
	return u.Host
}

func accepts(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// waitClosed polls until addr refuses connections or the timeout passes.
func waitClosed(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if !accepts(addr) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New(addr + " still accepts connections")
		}
		<-tick.C
	}
}
