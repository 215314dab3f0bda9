package core

// SystemNamespaces returns the namespaces Kubernetes itself owns:
// admission always excludes them (a broken rule or a dead Portal must never
// block what repairs the cluster), NetworkPolicy analysis leaves them out
// by default (their policies are the platform's), and destructive actions
// never act in them. A new slice each call: callers append Portal's own.
func SystemNamespaces() []string {
	return []string{"kube-system", "kube-public", "kube-node-lease"}
}
