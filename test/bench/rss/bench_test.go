//go:build linux

package rss_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/freeport"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/test/bench/benchstat"
)

// Settings, each overridable by an environment variable.
var (
	pods    = benchstat.EnvInt("PORTAL_BENCH_RSS_PODS", 300)
	clients = benchstat.EnvInt("PORTAL_BENCH_CLIENTS", 8)
)

// workload is the namespace the pods go to; Portal's own comes from the
// chart's args.
const workload = "bench-rss"

// BenchmarkPortalRSS reports the resident memory of `portal run` with the
// chart's default args after admitting pods (see doc.go). Each call is one
// whole run, whatever b.N; -count n makes n independent runs.
func BenchmarkPortalRSS(b *testing.B) {
	if testing.Short() {
		b.Skip("builds portal and starts a control plane")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := devcluster.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	bin, err := portalBinary(ctx, b, root)
	if err != nil {
		b.Fatal(err)
	}
	args, namespace, err := chartArgs(filepath.Join(root, "deploy", "helm", "testdata", "golden", "default.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	cluster, err := devcluster.Start(ctx, devcluster.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			b.Error(err)
		}
	}()
	restCfg, cl, nRules, err := prepareCluster(ctx, cluster, root, namespace)
	if err != nil {
		b.Fatal(err)
	}
	p, err := startPortal(b, cluster, bin, args)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Stop()
	if err := p.WaitReady(ctx, cl, nRules, webhookReady(cl)); err != nil {
		b.Fatal(err)
	}
	b.Logf("portal pid %d ready with %d rules; load %s", p.Pid(), nRules, benchstat.LoadAverage())
	ready, err := benchstat.ProcStatus(p.Pid())
	if err != nil {
		b.Fatal(err)
	}

	// The peaks a scrape of process_resident_memory_bytes could see once
	// Portal serves; VmHWM also holds the start-up, before main.
	sampler := benchstat.SamplePeaks(p.Pid(), "VmRSS", "RssAnon")
	errs := createPods(ctx, restCfg, pods)
	peaks := sampler.Stop()
	rssPeak, anonPeak := max(peaks["VmRSS"], ready["VmRSS"]), max(peaks["RssAnon"], ready["RssAnon"])
	if len(errs) > 0 {
		b.Fatal(errors.Join(append(errs[:min(len(errs), 3)], p.LogTail())...))
	}
	// Settled: resident memory flat for ten seconds, the figure a scrape
	// gives between bursts of admissions.
	settled, err := settle(ctx, p.Pid())
	if err != nil {
		b.Fatal(err)
	}
	if f := os.Getenv("PORTAL_BENCH_RSS_HEAPPROFILE"); f != "" {
		if err := heapProfile(ctx, p.pprofURL, f); err != nil {
			b.Error(err)
		}
	}
	if m, err := sections(p.Pid(), bin); err == nil {
		b.Logf("resident of the executable: %s", m)
	} else {
		b.Error(err)
	}
	reportRSS(b, ready, settled, rssPeak, anonPeak)
}

// portalBinary returns $PORTAL_BENCH_RSS_BINARY, or a portal built from the
// checkout, with its pages written back.
func portalBinary(ctx context.Context, b *testing.B, root string) (string, error) {
	bin := os.Getenv("PORTAL_BENCH_RSS_BINARY")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "portal")
		if err := buildPortal(ctx, root, bin); err != nil {
			return "", err
		}
	}
	// In a node the image was unpacked before the pod started and its
	// pages written back; a binary written a moment ago still has dirty
	// pages in the page cache, which the kernel keeps there.
	if err := syncFile(bin); err != nil {
		return "", err
	}
	return bin, nil
}

// prepareCluster creates Portal's and the workload's namespaces and the
// rules, and returns the clients (without client-side rate limit) and the
// number of rules.
func prepareCluster(ctx context.Context, cluster *devcluster.Cluster, root, namespace string) (*rest.Config, client.Client, int, error) {
	restCfg := rest.CopyConfig(cluster.Config)
	restCfg.QPS, restCfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, 0, err
	}
	scheme, err := manager.Scheme()
	if err != nil {
		return nil, nil, 0, err
	}
	cl, err := client.New(restCfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, 0, err
	}
	for _, ns := range []string{namespace, workload} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, nil, 0, err
		}
	}
	nRules, err := installRules(ctx, cl, root)
	if err != nil {
		return nil, nil, 0, err
	}
	return restCfg, cl, nRules, nil
}

// reportRSS logs and reports Portal's memory: when ready, settled after the
// pods, and the peaks (kB) sampled from ready on.
func reportRSS(b *testing.B, ready, settled map[string]int64, rssPeak, anonPeak int64) {
	b.Logf("ready: %s; after %d pods: %s; load %s", describe(ready), pods, describe(settled), benchstat.LoadAverage())
	mib := func(kB int64) float64 { return float64(kB) / 1024 }
	b.Logf("peak from ready on: VmRSS %.1f MiB, RssAnon %.1f MiB", mib(rssPeak), mib(anonPeak))
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(mib(ready["VmRSS"]), "rss-ready-MiB")
	b.ReportMetric(mib(settled["VmRSS"]), "rss-MiB")
	b.ReportMetric(mib(settled["RssAnon"]), "anon-MiB")
	b.ReportMetric(mib(settled["RssFile"]), "file-MiB")
	b.ReportMetric(mib(max(rssPeak, settled["VmRSS"])), "rss-peak-MiB")
	b.ReportMetric(mib(max(anonPeak, settled["RssAnon"])), "anon-peak-MiB")
	b.ReportMetric(mib(settled["VmHWM"]), "rss-hwm-MiB")
}

func describe(st map[string]int64) string {
	return fmt.Sprintf("VmRSS %.1f MiB (anon %.1f, file %.1f), VmHWM %.1f MiB",
		float64(st["VmRSS"])/1024, float64(st["RssAnon"])/1024, float64(st["RssFile"])/1024, float64(st["VmHWM"])/1024)
}

// settle waits until Portal's RSS has not changed by more than 1% over ten
// samples a second apart, and returns the last reading.
func settle(ctx context.Context, pid int) (map[string]int64, error) {
	var last map[string]int64
	var history []int64
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(context.Context) (bool, error) {
		st, err := benchstat.ProcStatus(pid)
		if err != nil {
			return false, err
		}
		last = st
		history = append(history, st["VmRSS"])
		if len(history) < 10 {
			return false, nil
		}
		w := history[len(history)-10:]
		lo, hi := w[0], w[0]
		for _, v := range w {
			lo, hi = min(lo, v), max(hi, v)
		}
		return (hi-lo)*100 <= lo, nil
	})
	if err != nil && last != nil && wait.Interrupted(err) {
		return last, nil // still moving: report where it is
	}
	return last, err
}

// buildPortal builds cmd/portal as `make image` does.
func buildPortal(ctx context.Context, root, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-trimpath", "-tags", "portal_nodev", "-ldflags", "-s -w -buildid=", "-o", out, "./cmd/portal")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/portal: %w\n%s", err, b)
	}
	return nil
}

func syncFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// chartArgs returns the args of the portal container of the chart's
// Deployment in golden, without the subcommand, and the --namespace value.
func chartArgs(golden string) ([]string, string, error) {
	data, err := os.ReadFile(golden)
	if err != nil {
		return nil, "", err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return nil, "", fmt.Errorf("%s: no Deployment runs portal run", golden)
		}
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", golden, err)
		}
		if u.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			if len(args) == 0 || args[0] != "run" {
				continue
			}
			for _, a := range args {
				if ns, ok := strings.CutPrefix(a, "--namespace="); ok {
					return args[1:], ns, nil
				}
			}
			return nil, "", fmt.Errorf("%s: portal run without --namespace", golden)
		}
	}
}

// portal is the child process.
type portal struct {
	*benchstat.Child
	pprofURL string
}

// startPortal runs bin with the chart's args, listening on 127.0.0.1: the
// later flags override the chart's.
func startPortal(b *testing.B, cluster *devcluster.Cluster, bin string, args []string) (*portal, error) {
	dir := b.TempDir()
	kc, err := cluster.Kubeconfig()
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	ports, err := freeport.PickN("127.0.0.1", 4)
	if err != nil {
		return nil, err
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	args = append(append([]string{"run"}, args...),
		"--kubeconfig="+kubeconfig,
		"--webhook-local", "--webhook-host=127.0.0.1", "--webhook-port="+strconv.Itoa(ports[0]),
		"--health-probe-bind-address="+addr(ports[1]),
		"--metrics-bind-address="+addr(ports[2]),
		"--pprof-bind-address="+addr(ports[3]),
	)
	// More flags to compare with, e.g. --drop-executable-pages=false.
	args = append(args, strings.Fields(os.Getenv("PORTAL_BENCH_RSS_ARGS"))...)
	logPath := filepath.Join(dir, "portal.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c, err := benchstat.StartCommand(cmd, logFile, "http://"+addr(ports[2])+"/metrics", "http://"+addr(ports[1])+"/readyz")
	if err != nil {
		return nil, err
	}
	return &portal{Child: c, pprofURL: "http://" + addr(ports[3]) + "/debug/pprof/heap"}, nil
}

// webhookReady: Portal's webhook configuration carries its CA bundle.
func webhookReady(cl client.Client) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		var list admissionregistrationv1.ValidatingWebhookConfigurationList
		if err := cl.List(ctx, &list); err != nil {
			return false, "", err
		}
		for _, vwc := range list.Items {
			for _, w := range vwc.Webhooks {
				if len(w.ClientConfig.CABundle) > 0 {
					return true, "", nil
				}
			}
		}
		return false, "a webhook configuration with a CA bundle", nil
	}
}

func installRules(ctx context.Context, cl client.Client, root string) (int, error) {
	docs, err := manifest.ReadPaths([]string{filepath.Join(root, "examples", "rules", "pod-security")}, nil)
	if err != nil {
		return 0, err
	}
	for _, d := range docs {
		var spec policyv1alpha1.RuleSpec
		if err := yaml.UnmarshalStrict(d.Data, &spec); err != nil {
			return 0, d.Errorf("not a plain rule: %v", err)
		}
		if err := cl.Create(ctx, &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: spec.Name}, Spec: spec}); err != nil {
			return 0, d.Errorf("install rule %q: %v", spec.Name, err)
		}
	}
	return len(docs), nil
}

// createPods creates n compliant pods in the workload namespace from
// clients concurrent clients, each with its own connection.
func createPods(ctx context.Context, cfg *rest.Config, n int) []error {
	var next atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range clients {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return []error{err}
		}
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				_, err := cs.CoreV1().Pods(workload).Create(ctx, benchstat.CompliantPod(workload, fmt.Sprintf("rss-%05d", i)), metav1.CreateOptions{})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// heapProfile saves Portal's heap profile to file.
func heapProfile(ctx context.Context, url, file string) error {
	code, body, err := benchstat.HTTPGet(ctx, url)
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("%s: HTTP %d", url, code)
	}
	return os.WriteFile(file, body, 0o644)
}

// sections returns, per section of the executable, how much of it is
// resident in the process: the pages of /proc/<pid>/pagemap marked present
// in the mappings of bin, attributed to the section their address is in.
func sections(pid int, bin string) (string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return "", err
	}
	defer f.Close()
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return "", err
	}
	defer pm.Close()
	page := uint64(os.Getpagesize())
	var out []string
	var total, size uint64
	entry := make([]byte, 8)
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		var resident uint64
		for a := s.Addr &^ (page - 1); a < s.Addr+s.Size; a += page {
			if _, err := pm.ReadAt(entry, int64(a/page*8)); err != nil {
				return "", err
			}
			if binary.LittleEndian.Uint64(entry)&(1<<63) != 0 {
				resident += page
			}
		}
		total, size = total+resident, size+s.Size
		if s.Size >= 1<<20 {
			out = append(out, fmt.Sprintf("%s %.1f of %.1f MiB", s.Name, mib(resident), mib(s.Size)))
		}
	}
	out = append(out, fmt.Sprintf("all %.1f of %.1f MiB", mib(total), mib(size)))
	return strings.Join(out, ", "), nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
