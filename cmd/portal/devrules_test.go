//go:build !portal_nodev

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/vilaca/portal/internal/manifest"
)

// --install-rules takes the tutorial's PortalClusterRule as it is, a plain
// rule as before, says where any other object belongs, and locates a typo
// with the field meant, as portal eval does.
func TestDevRuleForms(t *testing.T) {
	docs := manifest.Split("r.yaml", []byte(`apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata: {name: trusted-registry, labels: {team: platform}}
spec:
  mode: [audit]
  match: {gvk: [{group: "", kind: Pod}]}
  rule: container.image.registry != "ghcr.io"
---
name: plain
match: {gvk: [{group: "", kind: Pod}]}
rule: "false"
---
apiVersion: v1
kind: ConfigMap
metadata: {name: x}
---
apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata: {name: typo}
spec: {severty: high}
---
name: plain-typo
match: {gvk: [{group: "", kind: Pod}]}
rule: "false"
sevrity: high
`))
	pcr, err := devRule(docs[0])
	if err != nil || pcr.Name != "trusted-registry" || pcr.Labels["team"] != "platform" || pcr.Spec.Rule != `container.image.registry != "ghcr.io"` || len(pcr.Spec.Mode) != 1 {
		t.Fatalf("PortalClusterRule manifest: %+v, %v", pcr, err)
	}
	if pcr, err := devRule(docs[1]); err != nil || pcr.Name != "plain" {
		t.Fatalf("plain rule: %+v, %v", pcr, err)
	}
	for i, want := range map[int]string{
		2: "r.yaml:13: v1 ConfigMap is not a rule: --install-rules takes plain rules and PortalClusterRules; pass other objects to --install-manifests, or kubectl apply them once portal dev is ready",
		3: `r.yaml:20:8: unknown field "spec.severty": did you mean "severity"? (see docs/reference/rule-schema.md)`,
		4: `r.yaml:25:1: unknown field "sevrity": did you mean "severity"? (see docs/reference/rule-schema.md)`,
	} {
		if _, err := devRule(docs[i]); fmt.Sprint(err) != want {
			t.Errorf("document %d: got %v\nwant %s", i, err, want)
		}
	}
}

// A path that does not exist names the flag it came from.
func TestDevInstallRulesMissingPath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	_, _, err := installRules(context.Background(), nil, []string{missing})
	want := fmt.Sprintf("--install-rules: stat %s: %s", missing, "no such file or directory")
	if fmt.Sprint(err) != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

// The ready message shows the demo's commands only where they do what their
// comments say: not after --install-rules or --install-manifests replaced
// the demo's, nor with the layer they show off.
func TestDevTryHintFollowsWhatWasInstalled(t *testing.T) {
	assets := devAssets{root: t.TempDir()}
	pods := relative(assets.path(filepath.Join("examples", "manifests", "pods.yaml")))
	head := "Try:\n  export KUBECONFIG=.portal-dev/kubeconfig\n  kubectl get portalclusterrules\n"
	podsLine := "  kubectl apply -f " + pods + "   # admission denies the privileged pod\n"
	reportsLine := "  kubectl get policyreports -A                          # audit found the legacy Deployment\n"
	for _, c := range []struct {
		name                         string
		rules, manifests, adm, audit bool
		want                         string
	}{
		{"the demo", true, true, true, true, head + podsLine + reportsLine},
		{"own rules", false, true, true, true, head},
		{"no manifests", true, false, true, true, head + podsLine},
		{"admission off", true, true, false, true, head + reportsLine},
		{"audit off", true, true, true, false, head + podsLine},
	} {
		o := &devOptions{kubeconfigOut: filepath.Join(".portal-dev", "kubeconfig"), demoRules: c.rules, demoManifests: c.manifests}
		o.cfg.Admission.Enabled, o.cfg.Audit.Enabled = c.adm, c.audit
		if got := o.tryHint("kubectl", assets); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
	if got := plural(1, "rule") + ", " + plural(19, "rule"); got != "1 rule, 19 rules" {
		t.Errorf("plural: %s", got)
	}
}
