package chart

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vilaca/portal/internal/devcluster"
)

// TestChartUpgradeTurnsWAFOn turns the WAF layer on with helm upgrade: the
// new replicas need the WAF cache certificate while an old replica without
// the layer still leads, and the rollout must complete anyway.
func TestChartUpgradeTurnsWAFOn(t *testing.T) {
	e := newEnv(t)
	e.install(t)
	t.Cleanup(func() {
		_, _ = e.helmQuiet("uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
	})
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	e.helm(t, "upgrade", releaseName, filepath.Join(root, "deploy", "helm", "portal"), "--namespace", releaseNS,
		"--reuse-values", "--set", "waf.enabled=true", "--wait", "--timeout", "3m")
	eventually(t, 2*time.Minute, "two ready replicas, both with the WAF layer", func(context.Context) (bool, error) {
		pods := e.portalPods(t)
		for _, p := range pods {
			if p.Labels["portal.io/layer-waf"] != "true" || !podReady(p) {
				return false, nil
			}
		}
		return len(pods) == 2, nil
	})
	if _, err := e.cs.CoreV1().Secrets(releaseNS).Get(context.Background(), releaseName+"-waf-cache-cert", metav1.GetOptions{}); err != nil {
		t.Fatalf("the WAF cache certificate Secret after the upgrade: %v", err)
	}
	e.assertNoForbidden(t)
	e.helm(t, "uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
	e.assertNothingLeft(t)
}
