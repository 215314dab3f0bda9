package chart

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestChartWAFWithoutAdmission installs audit and the WAF layer with the
// admission webhook off: the WAF layer still gets the RBAC for its cache
// certificate and becomes ready, and helm uninstall still removes what
// Portal wrote at run time (the certificate Secret, the Lease) although
// there is no webhook configuration to take down first.
func TestChartWAFWithoutAdmission(t *testing.T) {
	e := newEnv(t)
	t.Cleanup(func() {
		_, _ = e.helmQuiet("uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
	})
	e.install(t, "admission.enabled=false", "audit.enabled=true", "waf.enabled=true")
	eventually(t, time.Minute, "the WAF cache certificate Secret", func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Secrets(releaseNS).Get(ctx, releaseName+"-waf-cache-cert", metav1.GetOptions{})
		return err == nil, nil
	})
	e.assertNoForbidden(t)
	e.helm(t, "uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
	e.assertNothingLeft(t)
}
