package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/vilaca/portal/internal/freeport"
)

// The node's fixed addresses and names. Only one node runs on a host (the
// kubelet's port 10250, the /kubepods cgroups and kube-proxy's iptables
// chains are host-wide), so they need not vary. The ranges are kind's
// defaults, unlikely to collide with a developer's LAN.
const (
	// NodeName is the name of the Node object.
	NodeName = "portal-node"
	// NodeIP is the node's address: the gateway address of the pod bridge.
	// The API server and the kubelet listen there, so neither is reachable
	// from outside the machine.
	NodeIP = "10.244.0.1"
	// PodCIDR holds every pod IP.
	PodCIDR = "10.244.0.0/24"
	// ServiceCIDR holds every ClusterIP.
	ServiceCIDR = "10.96.0.0/24"

	bridgeName     = "portal0"
	serviceDevice  = "portal-svc0"
	firstServiceIP = "10.96.0.1"
	clusterDomain  = "cluster.local"
)

// NodeBinaries are the files the node needs in the binary directory, next
// to Binaries.
var NodeBinaries = []string{"kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy"}

// hostCommands are the programs the node runs from $PATH (Debian packages
// containerd, runc, iptables, iproute2).
var hostCommands = []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "iptables-save", "iptables-restore", "ip"}

// cniDir holds the CNI plugins of Debian's containernetworking-plugins.
const cniDir = "/usr/lib/cni"

var errNoNode = errors.New("devcluster: the cluster has no node (start it with Options.Node)")

// NodeRunDir is where the node keeps everything it writes (containerd's
// root and state, the kubelet's root, certificates, logs): one fixed
// directory, so a start after a crash finds and removes the leftovers.
func NodeRunDir() string { return filepath.Join(os.TempDir(), "portal-devcluster-node") }

// node is the part of a Cluster that runs pods.
type node struct {
	dir    string
	binDir string
	lock   *os.File
	reaper *reaper
	procs  []*process
	dns    *dnsServer
}

func (n *node) path(elem ...string) string {
	return filepath.Join(append([]string{n.dir}, elem...)...)
}

func (n *node) containerdSocket() string { return n.path("containerd", "containerd.sock") }

// checkNodePrerequisites fails with what to install when the host cannot
// run the node.
func checkNodePrerequisites(binDir string) error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("the node needs root (containerd, the kubelet and kube-proxy change mounts, cgroups, interfaces and iptables)"))
	}
	for _, name := range NodeBinaries {
		if fi, err := os.Stat(filepath.Join(binDir, name)); err != nil || !fi.Mode().IsRegular() {
			errs = append(errs, &MissingBinaryError{Name: name, Dir: binDir})
		}
	}
	for _, name := range hostCommands {
		if _, err := exec.LookPath(name); err != nil {
			errs = append(errs, fmt.Errorf("%s not found in $PATH: run `make node-tools` (apt-get install containerd runc containernetworking-plugins iptables conntrack)", name))
		}
	}
	for _, name := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniDir, name)); err != nil {
			errs = append(errs, fmt.Errorf("CNI plugin %s not found in %s: run `make node-tools`", name, cniDir))
		}
	}
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
		errs = append(errs, errors.New("the br_netfilter kernel module is not loaded (modprobe br_netfilter): Services between pods on the bridge need it"))
	}
	errs = append(errs, foreignRuntime(NodeRunDir()), diskHeadroom(os.TempDir()))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("devcluster: cannot run a node on this host: %w", err)
	}
	return nil
}

// nodeDiskHeadroom is the space the node needs above the kubelet's
// eviction threshold (nodefs.available 1%, node_config.go): its images,
// the pods' writable layers and logs.
const nodeDiskHeadroom = 1 << 30

// diskHeadroom refuses a disk the kubelet would soon call full: below 1%
// free it reports DiskPressure and taints the node, and the scheduler then
// leaves every pod Pending with only "untolerated taint(s)" to say why.
func diskHeadroom(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil // the kubelet reports the disk itself
	}
	return checkHeadroom(dir, st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize))
}

func checkHeadroom(dir string, free, total uint64) error {
	if need := total/100 + nodeDiskHeadroom; free < need {
		return fmt.Errorf("the disk holding %s has %.1f GiB free (%.1f%%): the node's kubelet reports DiskPressure below 1%% and taints itself, so pods would not be scheduled; free at least %.1f GiB more",
			dir, float64(free)/(1<<30), 100*float64(free)/float64(total), float64(need-free)/(1<<30))
	}
	return nil
}

// foreignRuntime refuses a host where a kubelet or containerd other than
// the node's runs: the node's cleanup removes the kubepods cgroups, the
// pods' network namespaces and runc's k8s.io state, which would be theirs.
func foreignRuntime(dir string) error {
	var errs []error
	_ = eachProcess(func(pid int, cmdline string) {
		comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
		if err != nil {
			return
		}
		switch name := strings.TrimSpace(string(comm)); name {
		case "kubelet", "containerd", "dockerd", "crio":
			if !strings.Contains(cmdline, dir+"/") {
				errs = append(errs, fmt.Errorf("%s (pid %d) runs on this host, not started by devcluster: a node here would take over its cgroups, network namespaces and runtime state", name, pid))
			}
		}
	})
	return errors.Join(errs...)
}

// prepareNode takes the host lock, removes what an earlier node left
// behind, sets up the network and containerd with the node's images, and
// points env's API server and etcd at the node's directory and address.
func prepareNode(ctx context.Context, env *envtest.Environment, binDir string) (_ *node, err error) {
	if err := checkNodePrerequisites(binDir); err != nil {
		return nil, err
	}
	n := &node{dir: NodeRunDir(), binDir: binDir}
	if n.lock, err = lockHost(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.stop())
		}
	}()
	if err := cleanHost(n.dir, binDir); err != nil {
		return nil, fmt.Errorf("devcluster: removing what an earlier node left behind: %w", err)
	}
	for _, d := range []string{"pki", "apiserver", "logs", "cni/net.d", "containerd"} {
		if err := os.MkdirAll(n.path(d), 0o700); err != nil {
			return nil, err
		}
	}
	// From here on a crash of this process leaves things behind: the reaper
	// removes them when it sees this process gone.
	if n.reaper, err = startReaper(n.dir, binDir, n.lock); err != nil {
		return nil, err
	}
	if err := setupHostNetwork(n.dir); err != nil {
		return nil, err
	}
	if err := n.writePKI(env); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	for ref, pkg := range nodeImages {
		if err := n.buildImage(ctx, pkg, ref); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// writePKI writes the certificates and configures env's API server to
// serve on NodeIP with them.
func (n *node) writePKI(env *envtest.Environment) error {
	pki, err := newNodePKI()
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.path("pki", "ca.crt"), pki.caPEM, 0o644); err != nil {
		return err
	}
	apiDir := n.path("apiserver")
	serverNames := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + clusterDomain}
	serverIPs := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(NodeIP), net.ParseIP(firstServiceIP)}
	if err := pki.issue(apiDir, "apiserver", "kube-apiserver", nil, serverNames, serverIPs); err != nil {
		return err
	}
	// Service account tokens are signed with this key (envtest names the files).
	if err := pki.issue(apiDir, "sa-signer", "service-accounts", nil, nil, nil); err != nil {
		return err
	}
	if err := pki.issue(n.path("pki"), "kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil); err != nil {
		return err
	}
	port, err := freeport.Pick(NodeIP)
	if err != nil {
		return err
	}
	api := env.ControlPlane.GetAPIServer()
	// apiserver.crt exists, so envtest keeps these files and uses this CA.
	api.CertDir = apiDir
	api.SecureServing.Address = NodeIP
	api.SecureServing.Port = strconv.Itoa(port)
	api.SecureServing.CA = pki.caPEM
	args := api.Configure()
	// envtest turns the ServiceAccount admission plugin off; pods need it
	// for their token volume.
	args.Disable("disable-admission-plugins")
	args.Set("service-cluster-ip-range", ServiceCIDR)
	args.Set("advertise-address", NodeIP)
	// Webhook and aggregated API calls go to endpoint IPs, not through
	// kube-proxy's ClusterIP rules.
	args.Set("enable-aggregator-routing", "true")
	args.Set("kubelet-client-certificate", n.path("pki", "kubelet-client.crt"))
	args.Set("kubelet-client-key", n.path("pki", "kubelet-client.key"))
	args.Set("kubelet-preferred-address-types", "InternalIP")
	env.ControlPlane.Etcd.DataDir = n.path("etcd")
	return nil
}

func (n *node) startContainerd(ctx context.Context) error {
	cfg := n.path("containerd", "config.toml")
	if err := os.WriteFile(cfg, []byte(containerdConfig(n)), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(n.path("cni", "net.d", "10-portal.conflist"), []byte(cniConfig(n)), 0o644); err != nil {
		return err
	}
	if err := n.run("containerd", "containerd", "--config", cfg); err != nil {
		return err
	}
	return n.waitFor(ctx, "containerd to answer", func(ctx context.Context) (bool, error) {
		return exec.CommandContext(ctx, "ctr", "--address", n.containerdSocket(), "version").Run() == nil, nil
	})
}

// startComponents starts the controllers, the scheduler, the kubelet and
// kube-proxy against the running API server, and the cluster DNS, and
// waits for the node to be Ready.
func (n *node) startComponents(ctx context.Context, cfg *rest.Config, kubeconfig []byte) error {
	kc := n.path("admin.kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		return err
	}
	for name, content := range map[string]string{"kubelet.yaml": kubeletConfig(n), "kube-proxy.yaml": kubeProxyConfig(n, kc)} {
		if err := os.WriteFile(n.path(name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	// The kubelet writes NodeIP into every pod's resolv.conf: answer there
	// before the first pod starts.
	dns, err := startDNS(ctx, cfg, net.JoinHostPort(NodeIP, "53"))
	if err != nil {
		return err
	}
	n.dns = dns
	bin := func(name string) string { return filepath.Join(n.binDir, name) }
	steps := []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{
			"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
			"--controllers=" + strings.Join(controllers, ","),
			"--service-account-private-key-file=" + n.path("apiserver", "sa-signer.key"),
			"--root-ca-file=" + n.path("pki", "ca.crt"),
			"--use-service-account-credentials=false",
		}},
		{"kube-scheduler", []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
			"--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false"}},
		{"kubelet", []string{
			"--config=" + n.path("kubelet.yaml"), "--kubeconfig=" + kc,
			"--root-dir=" + n.path("kubelet"), "--cert-dir=" + n.path("kubelet", "pki"),
			"--node-ip=" + NodeIP, "--hostname-override=" + NodeName,
		}},
		{"kube-proxy", []string{"--config=" + n.path("kube-proxy.yaml"), "--hostname-override=" + NodeName}},
	}
	for _, s := range steps {
		if err := n.run(s.name, bin(s.name), s.args...); err != nil {
			return err
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return n.waitFor(ctx, "node "+NodeName+" to be Ready", func(ctx context.Context) (bool, error) {
		no, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range no.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// controllers are what workloads in tests need: Deployments, Services'
// EndpointSlices, ServiceAccounts and their CA bundle, namespace deletion
// and garbage collection, PodDisruptionBudgets. Fewer controllers make the
// default ServiceAccount appear within a second of the API server.
var controllers = []string{
	"deployment-controller", "replicaset-controller", "statefulset-controller", "daemonset-controller", "job-controller",
	"endpointslice-controller", "endpoints-controller", "serviceaccount-controller", "serviceaccount-token-controller",
	"root-ca-certificate-publisher-controller", "namespace-controller", "garbage-collector-controller",
	"disruption-controller", "pod-garbage-collector-controller",
	// Removes the not-ready taint the kubelet registers the node with.
	"node-lifecycle-controller",
}

// waitFor polls cond until it holds, the context ends, a component exits
// or two minutes pass.
func (n *node) waitFor(ctx context.Context, what string, cond wait.ConditionWithContextFunc) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range n.procs {
			if err := p.exited(); err != nil {
				return false, fmt.Errorf("%w; the end of its log:\n%s", err, n.logTail(p.name))
			}
		}
		return cond(ctx)
	})
	if err != nil {
		return fmt.Errorf("devcluster: waiting for %s: %w (logs in %s)", what, err, n.path("logs"))
	}
	return nil
}

// process is one node component.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.name, p.err)
	default:
		return nil
	}
}

// run starts a component with its output in logs/<name>.log. The kernel
// kills it when this process dies (the reaper then removes the rest).
func (n *node) run(name, path string, args ...string) error {
	logFile, err := os.OpenFile(n.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("devcluster: starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	n.procs = append(n.procs, p)
	return nil
}

// stopComponents kills the node's processes, newest first, and waits for
// them to exit.
func (n *node) stopComponents() {
	for i := len(n.procs) - 1; i >= 0; i-- {
		p := n.procs[i]
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	n.procs = nil
	if n.dns != nil {
		n.dns.stop()
		n.dns = nil
	}
}

// stop kills every component, removes everything the node put on the host
// and releases the host lock.
func (n *node) stop() error {
	n.stopComponents()
	var errs []error
	if n.lock != nil {
		errs = append(errs, cleanHost(n.dir, n.binDir))
		if n.reaper != nil {
			errs = append(errs, n.reaper.release())
		}
		errs = append(errs, n.lock.Close())
		n.lock = nil
	}
	return errors.Join(errs...)
}

// logTail is the end of a component's log: its reason for exiting, for the
// error, since the node's directory (and the log) goes at cleanup.
func (n *node) logTail(name string) string {
	b, err := os.ReadFile(n.path("logs", name+".log"))
	if err != nil {
		return err.Error()
	}
	const max = 3000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
