package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/freeport"
)

// TestLayerSwitches runs two managers one after the other in one process,
// each with its own metrics registry: with only admission on, the webhook
// serves and nothing of audit is set up; with only audit on, no webhook
// listens or is configured and audit runs.
func TestLayerSwitches(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	c, err := client.New(cl.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Portal's namespace holds the webhook certificate's Secret.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Defaults().Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	t.Run("admission only", func(t *testing.T) {
		cfg, reg, port := layerConfig(t, "layers-admission")
		cfg.Admission.Enabled = true
		runUntilReady(t, cl, cfg)
		// Ready means the rules loaded; the certificate is issued alongside.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				return false, nil
			}
			conn.Close()
			return true, nil
		})
		if err != nil {
			t.Fatalf("the webhook does not serve TLS on %d: %v", port, err)
		}
		if fams := families(t, reg, "portal_audit_"); len(fams) > 0 {
			t.Errorf("audit is set up with only admission on: %v", fams)
		}
		// No layer produces findings: no pipeline, so no sink runner and
		// no report writer.
		if fams := families(t, reg, "portal_findings_"); len(fams) > 0 {
			t.Errorf("the findings pipeline is set up with only admission on: %v", fams)
		}
		if fams := families(t, reg, "portal_admission_"); len(fams) == 0 {
			t.Error("no admission metric registered")
		}
		// The cluster cache exists but nothing acquired a resource.
		if fams := families(t, reg, "portal_cluster_cache_informers"); len(fams) > 0 {
			t.Errorf("informers run with only admission on: %v", fams)
		}
	})

	t.Run("audit only", func(t *testing.T) {
		cfg, reg, port := layerConfig(t, "layers-audit")
		cfg.Audit.Enabled = true
		if err := cfg.Sinks.Parse("--report-format=none"); err != nil {
			t.Fatal(err)
		}
		// One audit rule on ConfigMaps: audit acquires them from the
		// manager's cluster cache.
		cfg.RulesFolder = t.TempDir()
		if err := os.WriteFile(filepath.Join(cfg.RulesFolder, "cm.yaml"), []byte(`name: layers-audit-cm
mode: [audit]
severity: low
match: {gvk: [{kind: ConfigMap}]}
rule: metadata.name != ""
message: flagged
`), 0o600); err != nil {
			t.Fatal(err)
		}
		runUntilReady(t, cl, cfg)
		if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			conn.Close()
			t.Errorf("something listens on the webhook port %d with only audit on", port)
		}
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: cfg.Admission.ConfigName}, &vwc); !apierrors.IsNotFound(err) {
			t.Errorf("webhook configuration %s with only audit on: %v", cfg.Admission.ConfigName, err)
		}
		if fams := families(t, reg, "portal_audit_"); len(fams) == 0 {
			t.Error("no audit metric registered")
		}
		if fams := families(t, reg, "portal_findings_objects"); len(fams) == 0 {
			t.Error("audit is on, yet no findings pipeline with an audit producer")
		}
		if fams := families(t, reg, "portal_admission_"); len(fams) > 0 {
			t.Errorf("admission is set up with only audit on: %v", fams)
		}
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return len(families(t, reg, "portal_cluster_cache_informers")) == 1, nil
		})
		if err != nil {
			t.Errorf("audit's rule started no informer in the manager's cluster cache: %v", err)
		}
	})
}

// layerConfig is a configuration with every layer off, its own registry,
// no metrics or health listener, and a free port for the webhook.
func layerConfig(t testing.TB, name string) (Config, *prometheus.Registry, int) {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := Defaults()
	cfg.Registerer = reg
	cfg.MetricsAddr = "0"
	cfg.HealthAddr = "0"
	cfg.LeaderElection = false
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Admission.Host = "127.0.0.1"
	cfg.Admission.Port = port
	cfg.Admission.LocalURL = true
	cfg.Admission.ConfigName = name
	cfg.Admission.CertSecret = name + "-cert"
	return cfg, reg, port
}

// runUntilReady runs the manager until the test ends, and waits for it to
// say it is ready.
func runUntilReady(t testing.TB, cl *devcluster.Cluster, cfg Config) {
	t.Helper()
	ready := make(chan struct{})
	cfg.OnReady = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cl.Config, cfg)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Fatal("manager not ready within a minute")
	case err := <-done:
		t.Fatalf("manager stopped before ready: %v", err)
	}
}

// families lists the metric families in reg whose name starts with prefix.
func families(t *testing.T, reg *prometheus.Registry, prefix string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), prefix) {
			out = append(out, mf.GetName())
		}
	}
	return out
}
