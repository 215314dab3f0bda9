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
// rule as before, and says where any other object belongs.
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
		3: `r.yaml:17: not a PortalClusterRule: error unmarshaling JSON: while decoding JSON: json: unknown field "severty"`,
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
