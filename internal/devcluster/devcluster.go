// Package devcluster runs a local Kubernetes control plane (etcd and kube-apiserver) on
// 127.0.0.1: the cluster behind `portal dev` and the tests that need an API server.
//
// It wraps controller-runtime's envtest with the real binaries that `make tools` builds
// into bin/k8s. Nothing is downloaded and nothing is faked: when a binary is missing,
// Start fails and says so.
//
// The envtest environment variables KUBEBUILDER_CONTROLPLANE_START_TIMEOUT,
// KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT and KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT=true
// (print the apiserver and etcd logs) apply.
package devcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vilaca/portal/internal/freeport"
)

// ModulePath is the module whose go.mod marks the repository root.
const ModulePath = "github.com/vilaca/portal"

// Binaries are the files BinaryDir must hold.
var Binaries = []string{"kube-apiserver", "etcd", "kubectl"}

// defaultStartTimeout bounds the start of each component (etcd, kube-apiserver) when the
// context has no deadline and KUBEBUILDER_CONTROLPLANE_START_TIMEOUT is unset. envtest's
// own default (20s) is tight on a small machine that is also compiling.
const defaultStartTimeout = time.Minute

// nodeStopTimeout bounds the API server's and etcd's shutdown with a node.
const nodeStopTimeout = 90 * time.Second

// Options configures Start. The zero value is ready to use.
type Options struct {
	// CRDDirectoryPaths are directories (or files) of CustomResourceDefinition manifests
	// installed once the API server is up; a missing path is an error. nil means
	// <repo>/deploy/crds when that directory exists, otherwise none; a non-nil empty
	// slice installs nothing.
	CRDDirectoryPaths []string

	// BinaryDir holds kube-apiserver, etcd and kubectl. Empty means $KUBEBUILDER_ASSETS
	// when set, otherwise <repo>/bin/k8s, where <repo> is found by walking up from the
	// working directory to the go.mod of module github.com/vilaca/portal.
	BinaryDir string

	// APIServerFlags are added to kube-apiserver's command line, flag name
	// (without dashes) to value, e.g. "admission-control-config-file" to
	// make the API server present a client certificate to webhooks.
	APIServerFlags map[string]string

	// Node also runs a node that runs pods: containerd, the kubelet,
	// kube-proxy, kube-controller-manager and kube-scheduler, with the API
	// server on NodeIP instead of 127.0.0.1. It needs root, the binaries of
	// NodeBinaries in BinaryDir and the host packages `make node-tools`
	// installs. One node runs per host: Start waits (as long as ctx allows)
	// for another process's node to stop. Stop removes everything the node
	// put on the host; after a crash, the next Start does.
	Node bool
}

// Cluster is a running control plane. Call Stop when done.
type Cluster struct {
	// Config is an admin (system:masters) client configuration for the API server.
	Config *rest.Config

	env      *envtest.Environment
	binDir   string
	node     *node
	stopOnce sync.Once
	stopErr  error
}

// MissingBinaryError reports a control-plane binary that is not in the binary directory.
type MissingBinaryError struct {
	Name string // e.g. "kube-apiserver"
	Dir  string
}

func (e *MissingBinaryError) Error() string {
	return fmt.Sprintf("%s not found in %s: run `make tools`", e.Name, e.Dir)
}

// Unwrap makes errors.Is(err, fs.ErrNotExist) true.
func (e *MissingBinaryError) Unwrap() error { return fs.ErrNotExist }

// Start starts etcd and kube-apiserver on free ports of 127.0.0.1, waits until the API
// server serves the default namespace and installs the CRDs. A context deadline bounds
// the start of each component; when ctx is done by the time the control plane is up,
// Start stops it again and returns ctx's error.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.Node && runtime.GOOS != "linux" {
		return nil, fmt.Errorf("devcluster: a node (portal dev --node) runs only on Linux: it needs containerd, cgroups and iptables; this is %s", runtime.GOOS)
	}

	binDir, err := resolveBinaryDir(opts.BinaryDir)
	if err != nil {
		return nil, err
	}
	for _, name := range Binaries {
		fi, err := os.Stat(filepath.Join(binDir, name))
		if err != nil || !fi.Mode().IsRegular() {
			return nil, &MissingBinaryError{Name: name, Dir: binDir}
		}
	}

	crdPaths := opts.CRDDirectoryPaths
	if crdPaths == nil {
		crdPaths = defaultCRDPaths()
	}

	startTimeout, err := startTimeout(ctx)
	if err != nil {
		return nil, err
	}

	useExisting := false
	env := &envtest.Environment{
		BinaryAssetsDirectory:    binDir,
		CRDDirectoryPaths:        crdPaths,
		ErrorIfCRDPathMissing:    true,
		UseExistingCluster:       &useExisting,
		ControlPlaneStartTimeout: startTimeout,
	}
	// Explicit paths: envtest would otherwise let TEST_ASSET_* variables pick others.
	env.ControlPlane.GetAPIServer().Path = filepath.Join(binDir, "kube-apiserver")
	for k, v := range opts.APIServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(k, v)
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: filepath.Join(binDir, "etcd")}
	env.ControlPlane.KubectlPath = filepath.Join(binDir, "kubectl")

	// Before the node: it sets the API server's address and port itself,
	// and nothing is started yet that an error here would leave running.
	if err := pinPorts(env); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	var n *node
	if opts.Node {
		if os.Getenv("KUBEBUILDER_CONTROLPLANE_STOP_TIMEOUT") == "" {
			// With hundreds of objects and a node's watches the API server
			// can take longer than envtest's 20 s to shut down.
			env.ControlPlaneStopTimeout = nodeStopTimeout
		}
		if n, err = prepareNode(ctx, env, binDir); err != nil {
			return nil, err
		}
	}
	cfg, err := env.Start()
	if err != nil {
		// env.Start leaves whatever it started running when a later step fails.
		if stopErr := env.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the partly started control plane: %w", stopErr))
		}
		if n != nil {
			err = errors.Join(err, n.stop())
		}
		return nil, fmt.Errorf("devcluster: starting the control plane from %s: %w", binDir, err)
	}
	c := &Cluster{Config: cfg, env: env, binDir: binDir, node: n}
	if n != nil {
		if err := n.startComponents(ctx, cfg, env.KubeConfig); err != nil {
			return nil, errors.Join(err, c.Stop())
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// HasNode reports whether the cluster runs pods (Options.Node).
func (c *Cluster) HasNode() bool { return c.node != nil }

// NodeLogDir is the directory of the node components' logs (containerd,
// kubelet, kube-proxy, kube-controller-manager, kube-scheduler), or "".
func (c *Cluster) NodeLogDir() string {
	if c.node == nil {
		return ""
	}
	return c.node.path("logs")
}

// Stop stops kube-apiserver and etcd, waits for both processes to exit and removes their
// temporary directories; with a node, it also kills every pod and node component and
// removes what they put on the host. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		if c.node != nil {
			c.node.stopComponents()
		}
		if err := c.env.Stop(); err != nil {
			c.stopErr = fmt.Errorf("devcluster: stopping the control plane: %w", err)
		}
		if c.node != nil {
			if err := c.node.stop(); err != nil {
				c.stopErr = errors.Join(c.stopErr, fmt.Errorf("devcluster: removing the node: %w", err))
			}
		}
	})
	return c.stopErr
}

// Kubeconfig returns a kubeconfig file for the admin user of Config, with the CA and
// client certificate inline, suitable for writing to disk for kubectl or portal.
func (c *Cluster) Kubeconfig() ([]byte, error) {
	if len(c.env.KubeConfig) == 0 {
		return nil, errors.New("devcluster: no kubeconfig: the control plane is not started")
	}
	return append([]byte(nil), c.env.KubeConfig...), nil
}

// BinaryDir is the directory the kube-apiserver, etcd and kubectl binaries came from.
func (c *Cluster) BinaryDir() string { return c.binDir }

func startTimeout(ctx context.Context) (time.Duration, error) {
	if deadline, ok := ctx.Deadline(); ok {
		d := time.Until(deadline)
		if d <= 0 {
			return 0, context.DeadlineExceeded
		}
		return d, nil
	}
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") != "" {
		return 0, nil // envtest reads it
	}
	return defaultStartTimeout, nil
}

// resolveBinaryDir picks the directory of kube-apiserver, etcd and kubectl:
// the one given, $KUBEBUILDER_ASSETS, the running executable's own
// directory or its k8s/ subdirectory (bin/portal next to bin/k8s, as `make
// tools` lays them out, wherever the binary is run from), or bin/k8s of the
// checkout above the working directory.
func resolveBinaryDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if dir == "" {
		dir = besideExecutable()
	}
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", fmt.Errorf("devcluster: no kube-apiserver, etcd and kubectl found: not beside the executable (in its directory or its k8s/), and no checkout above the working directory to find bin/k8s in (%w); pass their directory (portal dev --k8s-bin-dir, or KUBEBUILDER_ASSETS)", err)
		}
		dir = filepath.Join(root, "bin", "k8s")
	}
	return filepath.Abs(dir)
}

// besideExecutable returns the directory next to the running executable
// that holds every binary of Binaries, or "".
func besideExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	for _, dir := range []string{filepath.Join(filepath.Dir(exe), "k8s"), filepath.Dir(exe)} {
		if hasBinaries(dir) {
			return dir
		}
	}
	return ""
}

func hasBinaries(dir string) bool {
	for _, b := range Binaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

func defaultCRDPaths() []string {
	root, err := RepoRoot()
	if err != nil {
		return nil
	}
	dir := filepath.Join(root, "deploy", "crds")
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return []string{dir}
	}
	return nil
}

// RepoRoot walks up from the working directory to the directory whose go.mod declares
// module github.com/vilaca/portal (nested modules such as hack/tools are skipped).
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if mod, err := modulePath(filepath.Join(dir, "go.mod")); err == nil && mod == ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s in %s or its parents", ModulePath, wd)
		}
		dir = parent
	}
}

// modulePath returns the module path declared in the go.mod file at path.
func modulePath(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		rest, ok := strings.CutPrefix(line, "module")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		mod := strings.TrimSpace(rest)
		if unq, err := strconv.Unquote(mod); err == nil {
			mod = unq
		}
		return mod, nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no module line", path)
}

// pinPorts gives etcd and the API server ports from freeport (a node then
// sets the API server's own): envtest picks its own by listening on port 0 and
// closing it, from the range every outgoing connection draws from, so on a
// busy machine (test packages starting control planes side by side) a
// client's connection can take one before the process binds it.
func pinPorts(env *envtest.Environment) error {
	ports, err := freeport.PickN("127.0.0.1", 3)
	if err != nil {
		return err
	}
	addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	env.ControlPlane.Etcd.URL = &url.URL{Scheme: "http", Host: addr(ports[0])}
	env.ControlPlane.Etcd.Configure().Set("listen-peer-urls", "http://"+addr(ports[1]))
	api := env.ControlPlane.GetAPIServer()
	api.SecureServing.Address, api.SecureServing.Port = "127.0.0.1", strconv.Itoa(ports[2])
	return nil
}
