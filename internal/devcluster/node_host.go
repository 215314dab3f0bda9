package devcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// lockPath is the host-wide lock a running node holds: `go test ./...`
// runs test binaries in parallel and only one node fits on a host.
func lockPath() string { return filepath.Join(os.TempDir(), "portal-devcluster-node.lock") }

// lockHost takes the host lock, waiting for another process's node to stop
// (as long as ctx allows).
func lockHost(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(lockPath(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("devcluster: node lock: %w", err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("devcluster: node lock %s: %w", lockPath(), err)
		}
		if !told {
			holder, _ := os.ReadFile(lockPath())
			fmt.Fprintf(os.Stderr, "devcluster: waiting for the node of process %s to stop (lock %s)\n", strings.TrimSpace(string(holder)), lockPath())
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("devcluster: waiting for the node lock %s: %w", lockPath(), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// hostSysctls are the kernel settings the node (or the kubelet and
// kube-proxy on their own) changes. Their values before the start are
// written to the node's directory and restored by cleanHost.
var hostSysctls = []string{
	"net/ipv4/ip_forward",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
	"net/ipv4/conf/all/route_localnet",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

const sysctlFile = "sysctl.orig"

// setupHostNetwork creates the pod bridge with NodeIP and routes
// ServiceCIDR into a second bridge without ports or addresses (a dummy
// interface, where the kernel has that module), where whatever kube-proxy
// does not rewrite dies unanswered: no packet to a cluster address leaves
// the machine. (An unreachable route would also keep them in, but it fails
// the host's own connections to a ClusterIP before kube-proxy's DNAT rule
// sees them.)
func setupHostNetwork(dir string) error {
	var saved bytes.Buffer
	for _, k := range hostSysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			fmt.Fprintf(&saved, "%s=%s\n", k, strings.TrimSpace(string(v)))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, sysctlFile), saved.Bytes(), 0o600); err != nil {
		return err
	}
	for _, k := range []string{"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"} {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte("1"), 0o644); err != nil {
			return fmt.Errorf("devcluster: sysctl %s=1: %w", k, err)
		}
	}
	_, cidr, err := net.ParseCIDR(PodCIDR)
	if err != nil {
		return err
	}
	ones, _ := cidr.Mask.Size()
	for _, args := range [][]string{
		{"link", "add", bridgeName, "type", "bridge"},
		{"addr", "add", fmt.Sprintf("%s/%d", NodeIP, ones), "dev", bridgeName},
		{"link", "set", bridgeName, "up"},
		{"link", "add", serviceDevice, "type", "bridge"},
		{"link", "set", serviceDevice, "up"},
		{"route", "add", ServiceCIDR, "dev", serviceDevice},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("devcluster: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// cleanHost removes everything a node running from dir leaves on the
// host, whether it stopped or crashed: its processes (and every pod's),
// mounts, network namespaces, cgroups, iptables chains, interfaces,
// sysctl changes and files. Each step runs even when an earlier one fails.
func cleanHost(dir, binDir string) error {
	var errs []error
	add := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	add("processes", killProcesses(func(pid int, cmdline string) bool { return strings.Contains(cmdline, dir+"/") }))
	add("pods", killCgroupProcesses())
	add("mounts", unmountAll(func(mp string) bool {
		return mp == dir || strings.HasPrefix(mp, dir+"/") || strings.HasPrefix(mp, "/run/netns/cni-")
	}))
	add("network namespaces", removeGlob("/run/netns/cni-*"))
	add("cgroups", removeCgroups())
	if kp := filepath.Join(binDir, "kube-proxy"); fileExists(kp) {
		// Its own chains in every mode; errors for modes never used are expected.
		_ = exec.Command(kp, "--cleanup").Run()
	}
	add("iptables", removeKubeChains())
	for _, link := range []string{bridgeName, serviceDevice} {
		add("interface "+link, deleteLink(link))
	}
	add("sysctls", restoreSysctls(filepath.Join(dir, sysctlFile)))
	add("runtime files", removeRuntimeLeftovers(dir))
	add("node directory", os.RemoveAll(dir))
	return errors.Join(errs...)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// eachProcess calls f with every process but this one and its command line
// (arguments joined by spaces).
func eachProcess(f func(pid int, cmdline string)) error {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		f(pid, string(bytes.ReplaceAll(raw, []byte{0}, []byte{' '})))
	}
	return nil
}

// killProcesses SIGKILLs every process (other than this one) match selects
// and waits until they are gone.
func killProcesses(match func(pid int, cmdline string) bool) error {
	var victims []int
	err := eachProcess(func(pid int, cmdline string) {
		if match(pid, cmdline) {
			victims = append(victims, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err != nil {
		return err
	}
	return waitGone(victims)
}

// waitGone waits until none of pids is alive (a zombie counts as gone).
func waitGone(pids []int) error {
	if len(pids) == 0 {
		return nil
	}
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		for _, pid := range pids {
			if alive(pid) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("processes %v still alive after SIGKILL: %w", pids, err)
	}
	return nil
}

func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// Field 3, after the parenthesised command name, is the state.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// kubepodsRoots are the kubelet's cgroup trees: one per cgroup v1
// hierarchy, or one on a cgroup v2 host.
func kubepodsRoots() []string {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if fileExists("/sys/fs/cgroup/kubepods") {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	return roots
}

// cgroupDirs lists every cgroup under the kubelet's trees, deepest first.
func cgroupDirs() []string {
	var dirs []string
	for _, root := range kubepodsRoots() {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// killCgroupProcesses SIGKILLs every process in the kubelet's cgroups (the
// pods' containers, whatever their runtime did) until none is left.
func killCgroupProcesses() error {
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		left := 0
		for _, d := range cgroupDirs() {
			raw, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(raw)) {
				if pid, err := strconv.Atoi(f); err == nil && alive(pid) {
					left++
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("processes left in the kubepods cgroups: %w", err)
	}
	return nil
}

func removeCgroups() error {
	var errs []error
	for _, d := range cgroupDirs() {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// mountPoints returns the mount points of this mount namespace that match.
func mountPoints(match func(string) bool) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if match(mp) {
			mps = append(mps, mp)
		}
	}
	return mps, sc.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll detaches every matching mount, deepest first, until none is
// left (mounts can be stacked).
func unmountAll(match func(string) bool) error {
	for range 10 {
		mps, err := mountPoints(match)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
		for _, mp := range mps {
			_ = unmountDetached(mp)
		}
	}
	mps, err := mountPoints(match)
	if err == nil && len(mps) > 0 {
		err = fmt.Errorf("still mounted: %s", strings.Join(mps, ", "))
	}
	return err
}

func removeGlob(pattern string) error {
	paths, err := filepath.Glob(pattern)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeKubeChains removes every KUBE-* chain, and every rule that jumps
// to one, from the IPv4 and IPv6 tables: kube-proxy's and the kubelet's.
// Each table is rewritten in one iptables-restore transaction.
func removeKubeChains() error {
	var errs []error
	for _, family := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(family + "-save"); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			out, err := exec.Command(family+"-save", "-t", table).Output()
			if err != nil || !bytes.Contains(out, []byte("KUBE-")) {
				continue
			}
			var keep bytes.Buffer
			for line := range strings.SplitSeq(string(out), "\n") {
				if strings.Contains(line, "KUBE-") {
					continue
				}
				keep.WriteString(line + "\n")
			}
			restore := exec.Command(family+"-restore", "-w")
			restore.Stdin = &keep
			if out, err := restore.CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s-restore -t %s: %w: %s", family, table, err, bytes.TrimSpace(out)))
			}
		}
	}
	return errors.Join(errs...)
}

func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

func restoreSysctls(file string) error {
	raw, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for line := range strings.SplitSeq(string(raw), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.Contains(k, "..") {
			continue
		}
		p := filepath.Join("/proc/sys", k)
		if cur, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeRuntimeLeftovers removes what the runtime and the kubelet write
// outside the node's directory: runc's state of containerd's k8s.io
// namespace, stale shim sockets, CNI results of the node's network, the
// kubelet's container log links and device-plugin socket. Directories go
// only when empty, as another user of them may exist.
func removeRuntimeLeftovers(dir string) error {
	var errs []error
	errs = append(errs, os.RemoveAll("/run/containerd/runc/k8s.io"))
	if socks, err := filepath.Glob("/run/containerd/s/*"); err == nil {
		for _, s := range socks {
			if c, err := net.DialTimeout("unix", s, time.Second); err == nil {
				c.Close()
				continue
			}
			errs = append(errs, os.Remove(s))
		}
	}
	// containerd names the results of the pods' loopback network cni-loopback-*.
	errs = append(errs, removeGlob("/var/lib/cni/results/portal-node-*"), removeGlob("/var/lib/cni/results/cni-loopback-*"))
	if links, err := filepath.Glob("/var/log/containers/*.log"); err == nil {
		for _, l := range links {
			if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, dir+"/") {
				errs = append(errs, os.Remove(l))
			}
		}
	}
	errs = append(errs, removeGlob("/var/lib/kubelet/device-plugins/kubelet.sock"))
	for _, d := range []string{
		"/run/containerd/s", "/run/containerd/runc", "/run/containerd", "/run/netns",
		"/var/lib/cni/results", "/var/lib/cni/networks", "/var/lib/cni",
		"/var/log/containers", "/var/log/pods",
		"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources", "/var/lib/kubelet",
	} {
		_ = syscall.Rmdir(d) // only when empty
	}
	return errors.Join(errs...)
}
