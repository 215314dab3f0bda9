package runtime_test

import (
	"slices"
	"testing"

	"github.com/vilaca/portal/internal/context/event"
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

// seesRules: the same question asked by a PortalRule of prod and by a
// PortalClusterRule: can the rule read the acting user's groups, the
// client's addresses and the authorization annotations of a request in
// prod? Each fails (raises a finding) when it can read what it asks about.
const seesRules = `
apiVersion: portal.io/v1alpha1
kind: PortalRule
metadata: {name: tenant-reads-more, namespace: prod}
spec:
  mode: [runtime]
  runtime: {events: [exec]}
  match: {gvk: [{group: "", kind: Pod}]}
  rule: >-
    len(event.user.groups) > 0 || len(event.impersonatedUser.groups) > 0 || len(event.sourceIPs) > 0 ||
    "authorization.k8s.io/decision" in event.annotations || "authorization.k8s.io/reason" in event.annotations
---
apiVersion: portal.io/v1alpha1
kind: PortalRule
metadata: {name: tenant-reads-who, namespace: prod}
spec:
  mode: [runtime]
  runtime: {events: [exec]}
  match: {gvk: [{group: "", kind: Pod}]}
  rule: >-
    event.user.username == "system:serviceaccount:ci:deployer" && event.impersonatedUser.username == "bob" &&
    event.annotations["pod-security.kubernetes.io/enforce-policy"] == "restricted:latest"
---
apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata: {name: cluster-reads-more}
spec:
  mode: [runtime]
  runtime: {events: [exec]}
  match: {gvk: [{group: "", kind: Pod}]}
  rule: >-
    "system:authenticated" in event.user.groups && "ops" in event.impersonatedUser.groups &&
    "10.0.0.7" in event.sourceIPs && event.annotations["authorization.k8s.io/decision"] == "allow" &&
    event.annotations["authorization.k8s.io/reason"] != ""
`

// TestNamespacedRulesSeeLessOfTheActor: a PortalRule of prod sees who
// acted in prod (the username, the impersonated username, Pod Security's
// annotations), but not the user's groups, the client's addresses (which
// the client can forge with X-Forwarded-For) nor the authorization
// annotations naming cluster RBAC; a PortalClusterRule sees them all.
func TestNamespacedRulesSeeLessOfTheActor(t *testing.T) {
	h := newHarness(t, seesRules, []string{webPod}, runtime.Options{})
	ev := execEvent("t1", event.StageResponseStarted)
	ev.SourceIPs = []string{"10.0.0.7", "203.0.113.9"}
	ev.ImpersonatedUser = &event.UserInfo{Username: "bob", Groups: []string{"ops"}}
	ev.Annotations = map[string]string{
		"authorization.k8s.io/decision":             "allow",
		"authorization.k8s.io/reason":               `RBAC: allowed by ClusterRoleBinding "ci-exec" of ClusterRole "exec" to ServiceAccount "deployer/ci"`,
		"pod-security.kubernetes.io/enforce-policy": "restricted:latest",
	}
	raised := h.src.Process(t.Context(), runtime.InputWebhook, &ev)
	var names []string
	for _, r := range raised {
		names = append(names, r.Rule.MetricLabel())
	}
	slices.Sort(names)
	if want := []string{"cluster-reads-more", "prod/tenant-reads-who"}; !slices.Equal(names, want) {
		t.Fatalf("rules raised = %v, want %v", names, want)
	}
}
