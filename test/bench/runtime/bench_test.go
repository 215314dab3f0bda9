//go:build linux

// Package runtime_test measures the runtime source against a real
// kube-apiserver whose audit webhook backend posts to Portal: the time
// from an API request to its action applied, and what the runtime layer
// costs the API server's own requests under a flood of audited requests.
package runtime_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"k8s.io/apimachinery/pkg/util/wait"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/freeport"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/pki"
	"github.com/vilaca/portal/test/bench/benchstat"
)

const (
	policy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: [pods/exec, secrets]
- level: None
`
	execRule = `name: bench-exec
severity: high
mode: [runtime]
runtime: {events: [exec]}
match: {gvk: [{group: "", version: v1, kind: Pod}], namespaces: {include: [bench]}}
rule: event.user.serviceAccount != nil
actions:
- {type: label, key: portal.io/exec-seen, value: "true", rateLimit: 1000/s}
`
	token = "runtime-bench-token-0123456789"
)

type env struct {
	cl   *devcluster.Cluster
	cs   *kubernetes.Clientset
	reg  *prometheus.Registry
	stop func()
}

// start starts a control plane, with its audit webhook posting to a Portal
// running --runtime when runtime is true, and no audit at all otherwise.
func start(b *testing.B, runtime bool, queue, workers int) *env {
	b.Helper()
	dir := b.TempDir()
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	flags := map[string]string{}
	if runtime {
		bundle, err := pki.NewSelfSigned(time.Now(), time.Hour, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		key, _ := x509.MarshalPKCS8PrivateKey(bundle.Serving.PrivateKey)
		var chain []byte
		for _, der := range bundle.Serving.Certificate {
			chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
		}
		kubeconfig := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster: {server: \"https://127.0.0.1:%d/audit\", certificate-authority-data: %s}\nusers:\n- name: a\n  user: {token: %s}\ncontexts:\n- name: p\n  context: {cluster: p, user: a}\ncurrent-context: p\n",
			port, base64.StdEncoding.EncodeToString(bundle.CABundle()), token)
		for name, data := range map[string][]byte{"tls.crt": chain, "tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
			"token": []byte(token), "policy.yaml": []byte(policy), "webhook.kubeconfig": []byte(kubeconfig), "rules/exec.yaml": []byte(execRule)} {
			_ = os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700)
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				b.Fatal(err)
			}
		}
		flags = map[string]string{"audit-policy-file": filepath.Join(dir, "policy.yaml"), "audit-webhook-config-file": filepath.Join(dir, "webhook.kubeconfig"),
			"audit-webhook-batch-max-wait": "50ms"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := devcluster.Start(ctx, devcluster.Options{APIServerFlags: flags})
	if err != nil {
		b.Fatal(err)
	}
	e := &env{cl: cl, reg: prometheus.NewRegistry(), stop: func() { _ = cl.Stop() }}
	if e.cs, err = kubernetes.NewForConfig(cl.Config); err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{"bench", "portal-bench"} {
		if _, err := e.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	if !runtime {
		return e
	}
	cfg := manager.Defaults()
	cfg.Namespace, cfg.LeaderElection, cfg.MetricsAddr, cfg.HealthAddr = "portal-bench", false, "0", "0"
	cfg.Registerer, cfg.Logger = e.reg, slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.RulesFolder = filepath.Join(dir, "rules")
	cfg.Runtime.Enabled, cfg.Runtime.Listen, cfg.Runtime.CertDir = true, fmt.Sprintf("127.0.0.1:%d", port), dir
	cfg.Runtime.AuditTokenFile, cfg.Runtime.QueueSize, cfg.Runtime.Workers = filepath.Join(dir, "token"), queue, workers
	cfg.Runtime.RequestRate = 10000
	if err := cfg.Sinks.Parse("--report-format=none", "--audit-log-findings=false"); err != nil {
		b.Fatal(err)
	}
	cfg.Actions.Enabled, cfg.Actions.Types, cfg.Actions.Workers = true, []string{"label"}, 8
	ready := make(chan struct{})
	cfg.OnReady = func() { close(ready) }
	runCtx, stopPortal := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- manager.Run(runCtx, cl.Config, cfg) }()
	select {
	case <-ready:
	case err := <-done:
		b.Fatalf("portal: %v", err)
	}
	e.stop = func() { stopPortal(); <-done; _ = cl.Stop() }
	return e
}

// serviceAccount makes bench/runner, allowed to exec into pods and read
// Secrets of bench, and returns a client that is it.
func (e *env) serviceAccount(b *testing.B) *kubernetes.Clientset {
	b.Helper()
	ctx := context.Background()
	if _, err := e.cs.CoreV1().ServiceAccounts("bench").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runner"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := e.cs.RbacV1().Roles("bench").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "runner"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods/exec", "secrets"}, Verbs: []string{"create", "get"}}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := e.cs.RbacV1().RoleBindings("bench").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "runner"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "runner"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "bench", Name: "runner"}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	exp := int64(3600)
	tr, err := e.cs.CoreV1().ServiceAccounts("bench").CreateToken(ctx, "runner", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(e.cl.Config)
	cfg.BearerToken, cfg.QPS, cfg.Burst = tr.Status.Token, -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// BenchmarkRuntimeRequestToAction: a ServiceAccount execs into 200 pods,
// 20 a second (each exec refused: the pods have no node, and audited);
// the time from sending each exec to seeing its pod labelled by the runtime
// rule's action, through the API server's audit webhook batching (50ms),
// Portal's queue, the rule, the action (a GET and an apply) and the watch.
func BenchmarkRuntimeRequestToAction(b *testing.B) {
	const pods, clients, every = 200, 4, 50 * time.Millisecond
	for range b.N {
		e := start(b, true, 10000, 4)
		sa := e.serviceAccount(b)
		ctx := context.Background()
		for i := range pods {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i)}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}}}
			if _, err := e.cs.CoreV1().Pods("bench").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		w, err := e.cs.CoreV1().Pods("bench").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		sent, seen := map[string]time.Time{}, map[string]time.Duration{}
		go func() {
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok || ev.Type != watch.Modified || p.Labels["portal.io/exec-seen"] != "true" {
					continue
				}
				now := time.Now()
				mu.Lock()
				if t0, ok := sent[p.Name]; ok {
					if _, done := seen[p.Name]; !done {
						seen[p.Name] = now.Sub(t0)
					}
				}
				mu.Unlock()
			}
		}()
		b.ResetTimer()
		var next atomic.Int64
		var wg sync.WaitGroup
		pace := time.NewTicker(every)
		defer pace.Stop()
		for range clients {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < pods; i = next.Add(1) - 1 {
					<-pace.C
					name := fmt.Sprintf("p-%d", i)
					mu.Lock()
					sent[name] = time.Now()
					mu.Unlock()
					_ = sa.CoreV1().RESTClient().Post().Namespace("bench").Resource("pods").Name(name).SubResource("exec").
						Param("command", "id").Param("stdout", "true").Do(ctx).Error()
				}
			})
		}
		wg.Wait()
		_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) == pods, nil
		})
		b.StopTimer()
		w.Stop()
		var ds []time.Duration
		mu.Lock()
		for _, d := range seen {
			ds = append(ds, d)
		}
		mu.Unlock()
		l := benchstat.Summarise(ds)
		b.ReportMetric(float64(l.N), "actions")
		b.ReportMetric(float64(l.P50.Milliseconds()), "p50-ms")
		b.ReportMetric(float64(l.P99.Milliseconds()), "p99-ms")
		b.ReportMetric(float64(l.Max.Milliseconds()), "max-ms")
		e.stop()
	}
}

// BenchmarkRuntimeFloodCreateLatency: 16 clients read a Secret as fast as
// the API server answers (each read an audited event) while one client
// creates 300 ConfigMaps; the ConfigMap create latency with no audit at
// all, and with the audit webhook posting to Portal whose queue (100) and
// one worker are far smaller than the flood, so it drops and counts.
func BenchmarkRuntimeFloodCreateLatency(b *testing.B) {
	for _, runtime := range []bool{false, true} {
		name := "without-runtime"
		if runtime {
			name = "with-runtime"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				e := start(b, runtime, 100, 1)
				ctx, stopFlood := context.WithCancel(context.Background())
				if _, err := e.cs.CoreV1().Secrets("bench").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				cfg := rest.CopyConfig(e.cl.Config)
				cfg.QPS, cfg.Burst = -1, 0
				flood, _ := kubernetes.NewForConfig(cfg)
				var reads atomic.Int64
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						for ctx.Err() == nil {
							if _, err := flood.CoreV1().Secrets("bench").Get(ctx, "s", metav1.GetOptions{}); err == nil {
								reads.Add(1)
							}
						}
					})
				}
				b.ResetTimer()
				var ds []time.Duration
				for i := range 300 {
					t0 := time.Now()
					if _, err := e.cs.CoreV1().ConfigMaps("bench").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i)}}, metav1.CreateOptions{}); err != nil {
						b.Fatal(err)
					}
					ds = append(ds, time.Since(t0))
				}
				b.StopTimer()
				stopFlood()
				wg.Wait()
				l := benchstat.Summarise(ds)
				b.ReportMetric(float64(l.P50.Microseconds())/1000, "create-p50-ms")
				b.ReportMetric(float64(l.P99.Microseconds())/1000, "create-p99-ms")
				b.ReportMetric(float64(reads.Load()), "flood-reads")
				if runtime {
					b.ReportMetric(gauge(e.reg, "portal_runtime_events_dropped_total"), "dropped")
					b.ReportMetric(gauge(e.reg, "portal_runtime_events_received_total"), "received")
				}
				e.stop()
			}
		})
	}
}

// gauge sums every series of the named metric in reg.
func gauge(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.Counter != nil {
				sum += m.Counter.GetValue()
			} else if m.Gauge != nil {
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}
