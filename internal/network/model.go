package network

import (
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// policy is what the analysis keeps of one NetworkPolicy: its selectors
// parsed once, its rules reduced to what the checks read. It never holds the
// object itself, so a cluster of thousands of policies costs little.
type Policy struct {
	namespace, name, uid string
	// podSelector selects the policy's targets; selectsAll is an empty
	// podSelector ({}), which selects every pod of the namespace.
	podSelector labels.Selector
	selectsAll  bool
	// declaredTypes is whether spec.policyTypes was written; ingress and
	// egress are the directions the policy isolates (as the API server
	// reads it: Ingress always, Egress when listed or when egress rules
	// exist and policyTypes is empty).
	declaredTypes   bool
	ingress, egress bool
	ingressRules    []rule
	egressRules     []rule
	// invalid is why a selector could not be parsed; such a policy gets
	// no check but the one saying so.
	invalid string
}

// rule is one ingress or egress rule.
type rule struct {
	// peers are from (ingress) or to (egress); none means every source or
	// destination.
	peers []peer
	// ports are the rule's ports; none means every port.
	ports []port
}

// peer is one entry of from or to.
type peer struct {
	// index is the peer's position in its rule, for messages.
	index int
	// podSelector and namespaceSelector are nil when absent.
	podSelector       labels.Selector
	podSelectorText   string
	namespaceSelector labels.Selector
	nsSelectorText    string
	ipBlock           *networkingv1.IPBlock
}

// port is one entry of ports.
type port struct {
	// protocol is empty when the manifest names none (the API server
	// defaults it to TCP).
	protocol string
	// port is the number or name; empty for every port.
	port string
	// endPort, when set, makes port a range.
	endPort int32
}

// parsePolicy reads a NetworkPolicy. A policy whose selectors do not parse
// (the API server validates them, so only a manifest can hold one) is kept
// with invalid set.
func parsePolicy(u *unstructured.Unstructured) (*Policy, error) {
	var np networkingv1.NetworkPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &np); err != nil {
		return nil, fmt.Errorf("NetworkPolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return newPolicy(&np), nil
}

func newPolicy(np *networkingv1.NetworkPolicy) *Policy {
	p := &Policy{namespace: np.Namespace, name: np.Name, uid: string(np.UID)}
	var err error
	sel := np.Spec.PodSelector
	p.selectsAll = len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0
	if p.podSelector, err = metav1.LabelSelectorAsSelector(&sel); err != nil {
		p.invalid = fmt.Sprintf("spec.podSelector: %v", err)
		return p
	}
	p.declaredTypes = len(np.Spec.PolicyTypes) > 0
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			p.ingress = true
		case networkingv1.PolicyTypeEgress:
			p.egress = true
		}
	}
	if !p.declaredTypes {
		// As the API server defaults it.
		p.ingress, p.egress = true, len(np.Spec.Egress) > 0
	}
	for i, r := range np.Spec.Ingress {
		pr, err := newRule(r.From, r.Ports)
		if err != nil {
			p.invalid = fmt.Sprintf("spec.ingress[%d]: %v", i, err)
			return p
		}
		p.ingressRules = append(p.ingressRules, pr)
	}
	for i, r := range np.Spec.Egress {
		pr, err := newRule(r.To, r.Ports)
		if err != nil {
			p.invalid = fmt.Sprintf("spec.egress[%d]: %v", i, err)
			return p
		}
		p.egressRules = append(p.egressRules, pr)
	}
	return p
}

func newRule(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) (rule, error) {
	var r rule
	for i, pe := range peers {
		p := peer{index: i, ipBlock: pe.IPBlock}
		var err error
		if pe.PodSelector != nil {
			if p.podSelector, err = metav1.LabelSelectorAsSelector(pe.PodSelector); err != nil {
				return r, fmt.Errorf("peer %d podSelector: %w", i, err)
			}
			p.podSelectorText = metav1.FormatLabelSelector(pe.PodSelector)
		}
		if pe.NamespaceSelector != nil {
			if p.namespaceSelector, err = metav1.LabelSelectorAsSelector(pe.NamespaceSelector); err != nil {
				return r, fmt.Errorf("peer %d namespaceSelector: %w", i, err)
			}
			p.nsSelectorText = metav1.FormatLabelSelector(pe.NamespaceSelector)
		}
		r.peers = append(r.peers, p)
	}
	for _, po := range ports {
		p := port{}
		if po.Protocol != nil {
			p.protocol = string(*po.Protocol)
		}
		if po.Port != nil {
			p.port = po.Port.String()
		}
		if po.EndPort != nil {
			p.endPort = *po.EndPort
		}
		r.ports = append(r.ports, p)
	}
	return r, nil
}

// crossPeer is a peer that selects by namespace labels: its match depends on
// other namespaces' labels and pods.
type crossPeer struct {
	namespaceSelector labels.Selector
	// podSelector is nil when the peer has none (every pod).
	podSelector labels.Selector
}

// crossPeers lists the policy's peers with a namespaceSelector.
func (p *Policy) crossPeers() []crossPeer {
	var out []crossPeer
	for _, rs := range [][]rule{p.ingressRules, p.egressRules} {
		for _, r := range rs {
			for _, pe := range r.peers {
				if pe.namespaceSelector != nil {
					out = append(out, crossPeer{namespaceSelector: pe.namespaceSelector, podSelector: pe.podSelector})
				}
			}
		}
	}
	return out
}

// touchedBy reports whether a pod with labels pod (nil: none) in a namespace
// with labels ns can change what the peer matches.
func (c crossPeer) touchedBy(ns, pod labels.Labels) bool {
	if ns == nil || !c.namespaceSelector.Matches(ns) {
		return false
	}
	return pod == nil || c.podSelector == nil || c.podSelector.Matches(pod)
}

// isDefaultDenyIngress reports whether the policy isolates every pod of its
// namespace for ingress and lets nothing in from everywhere: an empty
// podSelector, Ingress among its types, and no rule that allows every source
// on every port.
func (p *Policy) isDefaultDenyIngress() bool {
	if p.invalid != "" || !p.selectsAll || !p.ingress {
		return false
	}
	for _, r := range p.ingressRules {
		if len(r.peers) == 0 && len(r.ports) == 0 {
			return false
		}
	}
	return true
}

// privateRanges are the address ranges a broad ipBlock inside of is not the
// internet: RFC 1918, carrier-grade NAT (RFC 6598), loopback, link-local and
// IPv6 unique local and link-local addresses.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
}

// broadCIDR reports whether cidr opens a policy to a large part of the
// internet: a prefix no longer than maxV4 (IPv4) or maxV6 (IPv6) bits that
// is not inside a private range. A CIDR that does not parse is not broad
// (the API server rejects it; a manifest holding one fails elsewhere).
func broadCIDR(cidr string, maxV4, maxV6 int) bool {
	pf, err := netip.ParsePrefix(cidr)
	if err != nil {
		return false
	}
	if pf.Addr().Is4In6() && pf.Bits() >= 96 {
		// An IPv4-mapped block is the IPv4 block it maps.
		pf = netip.PrefixFrom(pf.Addr().Unmap(), pf.Bits()-96)
	}
	pf = pf.Masked()
	limit := maxV4
	if pf.Addr().Is6() {
		limit = maxV6
	}
	if pf.Bits() > limit {
		return false
	}
	for _, r := range privateRanges {
		if r.Bits() <= pf.Bits() && r.Contains(pf.Addr()) {
			return false
		}
	}
	return true
}
