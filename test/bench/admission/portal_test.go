//go:build linux

package admission_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	portaladmission "github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/test/bench/benchstat"
)

// startPortal runs Portal in a child process (see main_test.go) with its
// webhook on a free port of 127.0.0.1.
func startPortal(b *testing.B, cluster *devcluster.Cluster) (*benchstat.Child, error) {
	return benchstat.StartChild(b.TempDir(), "", cluster, func(s benchstat.ChildSetup) []string {
		return []string{
			childEnv + "=1",
			childKubeconfigEnv + "=" + s.Kubeconfig,
			childNamespaceEnv + "=" + portalNamespace,
			childWebhookEnv + "=" + strconv.Itoa(s.SparePort),
			childMetricsEnv + "=" + s.MetricsAddr,
			childHealthEnv + "=" + s.HealthAddr,
		}
	})
}

// webhookCoversPods is the benchmark's readiness condition: Portal's webhook
// configuration covers Pods with a CA bundle.
func webhookCoversPods(cl client.Client) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := cl.Get(ctx, client.ObjectKey{Name: portaladmission.ConfigName}, &vwc); err != nil {
			return false, "webhook configuration: " + err.Error(), client.IgnoreNotFound(err)
		}
		for _, w := range vwc.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				continue
			}
			for _, r := range w.Rules {
				if slices.Contains(r.Resources, "pods") {
					return true, "", nil
				}
			}
		}
		return false, "webhook configuration without pods or CA bundle", nil
	}
}
