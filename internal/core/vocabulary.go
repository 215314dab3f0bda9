package core

// The words layers share: defined once here, so a change reaches every
// layer that uses them.

// SystemNamespaces returns the namespaces Kubernetes itself owns:
// admission always excludes them (a broken rule or a dead Portal must never
// block what repairs the cluster), NetworkPolicy analysis leaves them out
// by default (their policies are the platform's), and destructive actions
// never act in them. A new slice each call: callers append Portal's own.
func SystemNamespaces() []string {
	return []string{"kube-system", "kube-public", "kube-node-lease"}
}

// TenantKeyPrefix is the only label and annotation key prefix a namespaced
// rule's actions may set: its author may not be allowed to relabel pods, and
// a label decides which Services and NetworkPolicies select a pod. The rule
// loader refuses other keys; the action engine checks again.
const TenantKeyPrefix = "portal.io/"
