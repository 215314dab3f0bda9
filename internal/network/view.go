package network

import (
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// Namespace is one namespace as a check reads it: its readable policies,
// its pods and the other namespaces, read through the analysis's budget
// (Config.MaxPodVisits), and the time of the analysis.
type Namespace struct {
	a *analysis
	// policies are the readable policies, sorted by name.
	policies []*Policy
	// dnsWide memoises AllowsDNSForEveryPod, which every policy's DNS
	// check asks: a namespace of thousands of policies reads them once.
	dnsWide *bool
}

// Name is the namespace's name.
func (n *Namespace) Name() string { return n.a.ns }

// Exists reports whether the Namespace object exists; a namespace that only
// policies name may not.
func (n *Namespace) Exists() bool {
	_, ok := n.a.w.namespaceLabels(n.a.ns)
	return ok
}

// Policies are the namespace's readable NetworkPolicies, sorted by name.
func (n *Namespace) Policies() []*Policy { return n.policies }

// HasPods reports whether the namespace holds a pod. It reads at most one
// pod and is not charged to the budget.
func (n *Namespace) HasPods() bool {
	has := false
	n.a.w.eachPod(n.a.ns, func(labels.Labels) bool {
		has = true
		return false
	})
	return has
}

// AnyPod reports whether a pod of the namespace matches sel, each pod read
// charged to the budget. Out of budget it answers true, the answer that
// raises no finding on a selector left unchecked.
func (n *Namespace) AnyPod(sel labels.Selector) bool { return n.a.anyPod(n.a.ns, sel, true) }

// Config is the configuration the analysis runs with (thresholds).
func (n *Namespace) Config() Config { return *n.a.cfg }

// Now is the time of the analysis, from the analyser's clock: a check
// whose outcome depends on time reads it here, never from the wall clock.
func (n *Namespace) Now() time.Time { return n.a.now }

// AllowsDNSForEveryPod reports whether a policy selecting every pod of the
// namespace allows DNS egress, as a shared "allow-dns" policy does.
func (n *Namespace) AllowsDNSForEveryPod() bool {
	if n.dnsWide == nil {
		v := false
		for _, p := range n.policies {
			if p.selectsAll && p.egress && allowsDNS(p.namespace, p.egressRules) {
				v = true
				break
			}
		}
		n.dnsWide = &v
	}
	return *n.dnsWide
}

// Name is the policy's name.
func (p *Policy) Name() string { return p.name }

// Namespace is the policy's namespace.
func (p *Policy) Namespace() string { return p.namespace }

// PodSelector selects the policy's targets; it is empty when the policy
// selects every pod of its namespace.
func (p *Policy) PodSelector() labels.Selector { return p.podSelector }
