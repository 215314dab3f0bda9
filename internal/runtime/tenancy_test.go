package runtime_test

import (
	"slices"
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/runtime"
)

const secretRules = `
apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata: {name: secret-read-by-ci}
spec:
  severity: high
  mode: [runtime]
  runtime: {events: [secret-read]}
  match: {gvk: [{group: "", version: v1, kind: Secret}], namespaces: {include: [prod]}}
  rule: event.user.username startsWith "system:serviceaccount:ci:"
---
apiVersion: portal.io/v1alpha1
kind: PortalRule
metadata: {name: tenant-sees-all, namespace: team-b}
spec:
  mode: [runtime]
  runtime: {events: [any]}
  match: {gvk: [{group: "", kind: Secret}, {group: "", kind: Namespace}]}
  rule: "true"
---
apiVersion: portal.io/v1alpha1
kind: PortalRule
metadata: {name: prod-owner, namespace: prod}
spec:
  mode: [runtime]
  runtime: {events: [secret-read]}
  match: {gvk: [{group: "", kind: Secret}]}
  rule: "true"
---
apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata: {name: contents-never-seen}
spec:
  mode: [runtime]
  runtime: {events: [secret-read]}
  match: {gvk: [{group: "", kind: Secret}]}
  rule: event.target == nil && object.data == nil && object.metadata.name == "db"
---
apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata: {name: namespace-deleted}
spec:
  mode: [runtime]
  runtime: {events: [any]}
  match: {gvk: [{group: "", kind: Namespace}]}
  rule: event.verb == "delete"
`

const dbSecret = `
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: prod, uid: secret-uid}
data: {password: aHVudGVyMg==}
`

// TestSecretReadTenancy: a ServiceAccount of ci reading a Secret of prod
// triggers the cluster rule and prod's own PortalRule; a PortalRule of
// another namespace sees nothing of it, even with runtime.events [any];
// and no rule sees what the Secret holds, though the cache has it.
func TestSecretReadTenancy(t *testing.T) {
	h := newHarness(t, secretRules, []string{dbSecret}, runtime.Options{})
	ev := auditEvent("r1", "system:serviceaccount:ci:builder", "get", "secrets", "", "prod", "db")
	raised := h.src.Process(t.Context(), runtime.InputWebhook, &ev)
	var names []string
	for _, r := range raised {
		names = append(names, r.Rule.MetricLabel())
	}
	slices.Sort(names)
	if want := []string{"contents-never-seen", "prod/prod-owner", "secret-read-by-ci"}; !slices.Equal(names, want) {
		t.Fatalf("rules raised = %v, want %v", names, want)
	}
	for _, r := range raised {
		if r.Resource.UID != "" {
			t.Errorf("a Secret target carries UID %q: it came from the cache", r.Resource.UID)
		}
	}
}

// TestClusterScopedEventsOnlyForClusterRules: deleting a Namespace is a
// cluster-scoped event: a PortalRule never sees it.
func TestClusterScopedEventsOnlyForClusterRules(t *testing.T) {
	h := newHarness(t, secretRules, nil, runtime.Options{})
	ev := auditEvent("n1", "alice", "delete", "namespaces", "", "", "team-b")
	raised := h.src.Process(t.Context(), runtime.InputWebhook, &ev)
	if len(raised) != 1 || raised[0].Rule.Name != "namespace-deleted" || raised[0].Resource != (core.ResourceRef{APIVersion: "v1", Kind: "Namespace", Name: "team-b"}) {
		t.Fatalf("raised = %+v, want namespace-deleted only", raised)
	}
}
