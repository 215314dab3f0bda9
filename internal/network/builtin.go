package network

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/vilaca/portal/internal/core"
)

// The built-in checks, by the rule name their findings carry.
const (
	CheckDefaultDenyMissing   = "np.default-deny-missing"
	CheckBroadCIDR            = "np.broad-cidr"
	CheckUnreachableSelector  = "np.unreachable-selector"
	CheckPolicyWithoutTargets = "np.policy-without-targets"
	CheckMissingPolicyTypes   = "np.missing-policy-types"
	CheckPortWithoutProtocol  = "np.port-without-protocol"
	CheckEgressBlocksDNS      = "np.egress-blocks-dns"
)

// The built-in checks, in the order they run: the one place to add one
// (docs/contributing/adding-a-check.md).
func init() {
	for _, c := range []Check{
		{Name: CheckDefaultDenyMissing, Severity: core.SeverityMedium, Summary: "namespace has pods and no default-deny ingress NetworkPolicy", Namespace: defaultDenyMissing},
		{Name: CheckBroadCIDR, Severity: core.SeverityHigh, Summary: "ipBlock opens the policy to a large part of the internet", Policy: broadCIDRs},
		{Name: CheckUnreachableSelector, Severity: core.SeverityLow, Summary: "a peer selector matches nothing, so its rule allows nothing", Policy: unreachable},
		{Name: CheckPolicyWithoutTargets, Severity: core.SeverityLow, Summary: "the policy's podSelector selects no pod", Policy: withoutTargets},
		{Name: CheckMissingPolicyTypes, Severity: core.SeverityLow, Summary: "policyTypes is missing or leaves out a direction the policy has rules for", Policy: policyTypeProblems},
		{Name: CheckPortWithoutProtocol, Severity: core.SeverityLow, Summary: "a port names no protocol and so means TCP only", Policy: portProblems},
		{Name: CheckEgressBlocksDNS, Severity: core.SeverityMedium, Summary: "egress is isolated and no rule allows DNS to kube-dns", Policy: egressBlocksDNS},
	} {
		Register(c)
	}
}

// defaultDenyMissing is np.default-deny-missing.
func defaultDenyMissing(ns *Namespace, m *Messages) {
	if !ns.Exists() {
		return
	}
	for _, p := range ns.Policies() {
		if p.isDefaultDenyIngress() {
			return
		}
	}
	if !ns.HasPods() {
		return
	}
	m.Add("namespace %s has pods and no default-deny ingress NetworkPolicy (podSelector {} with policyTypes [Ingress] and no rule that allows everything): a pod no other policy selects accepts traffic from anywhere", ns.Name())
}

// broadCIDRs is np.broad-cidr.
func broadCIDRs(ns *Namespace, p *Policy, m *Messages) {
	cfg := ns.a.cfg
	for _, d := range directions(p) {
		for i, r := range d.rules {
			for _, pe := range r.peers {
				if pe.ipBlock == nil || len(pe.ipBlock.Except) > 0 {
					continue
				}
				if broadCIDR(pe.ipBlock.CIDR, cfg.BroadCIDRIPv4Prefix, cfg.BroadCIDRIPv6Prefix) {
					m.Add("spec.%s[%d].%s[%d].ipBlock.cidr %s allows %s every public address in it, with no except",
						d.field, i, d.peers, pe.index, pe.ipBlock.CIDR, d.verb)
				}
			}
		}
	}
}

// unreachable is np.unreachable-selector: peers whose selectors are not
// empty and match nothing.
func unreachable(ns *Namespace, p *Policy, m *Messages) {
	for _, d := range directions(p) {
		for i, r := range d.rules {
			for _, pe := range r.peers {
				if msg := ns.a.peerMatchesNothing(pe); msg != "" {
					m.Add("spec.%s[%d].%s[%d] %s: the peer allows nothing", d.field, i, d.peers, pe.index, msg)
				}
			}
		}
	}
}

// withoutTargets is np.policy-without-targets.
func withoutTargets(ns *Namespace, p *Policy, m *Messages) {
	if p.selectsAll || ns.AnyPod(p.podSelector) {
		return
	}
	m.Add("spec.podSelector %s selects no pod in namespace %s: the policy applies to nothing", p.podSelector, ns.Name())
}

// egressBlocksDNS is np.egress-blocks-dns.
func egressBlocksDNS(ns *Namespace, p *Policy, m *Messages) {
	if !p.egress || ns.AllowsDNSForEveryPod() || allowsDNS(p.namespace, p.egressRules) {
		return
	}
	m.Add("the policy isolates its pods for egress and neither it nor a policy selecting every pod of namespace %s allows DNS (UDP port 53) to kube-dns in %s: name resolution fails", ns.Name(), dnsNamespace)
}

// peerMatchesNothing says how a peer matches nothing, or "" when it matches
// something, has no selector, or could not be checked within the budget.
func (a *analysis) peerMatchesNothing(pe peer) string {
	switch {
	case pe.namespaceSelector == nil && pe.podSelector == nil:
		return ""
	case pe.namespaceSelector == nil:
		if pe.podSelector.Empty() || a.anyPod(a.ns, pe.podSelector, true) {
			return ""
		}
		return fmt.Sprintf("podSelector %s matches no pod in namespace %s", pe.podSelectorText, a.ns)
	}
	namespaces, complete := a.matchingNamespaces(pe.namespaceSelector)
	if !complete {
		return ""
	}
	if len(namespaces) == 0 {
		return fmt.Sprintf("namespaceSelector %s matches no namespace", pe.nsSelectorText)
	}
	if pe.podSelector == nil || pe.podSelector.Empty() {
		return ""
	}
	for _, ns := range namespaces {
		if a.cfg.excluded(ns) {
			// The platform's namespaces (kube-dns in kube-system):
			// peers point at them by design, and manifests do not
			// hold their pods, so offline and live would disagree.
			return ""
		}
	}
	for _, ns := range namespaces {
		if a.anyPod(ns, pe.podSelector, true) {
			return ""
		}
	}
	if a.truncated {
		return ""
	}
	return fmt.Sprintf("podSelector %s matches no pod in the %d namespaces namespaceSelector %s matches", pe.podSelectorText, len(namespaces), pe.nsSelectorText)
}

// direction is the ingress or egress side of a policy, for the checks that
// read both alike.
type direction struct {
	field, peers, verb string
	rules              []rule
}

func directions(p *Policy) []direction {
	return []direction{
		{field: "ingress", peers: "from", verb: "traffic in from", rules: p.ingressRules},
		{field: "egress", peers: "to", verb: "traffic out to", rules: p.egressRules},
	}
}

// policyTypeProblems is np.missing-policy-types.
func policyTypeProblems(_ *Namespace, p *Policy, msgs *Messages) {
	if !p.declaredTypes {
		msgs.Add("spec.policyTypes is not set: the API server infers it (Ingress, and Egress only when egress rules exist), so a policy meant to deny all egress with no egress rules isolates ingress only")
		return
	}
	if !p.ingress && len(p.ingressRules) > 0 {
		msgs.Add("spec.ingress has rules but spec.policyTypes leaves out Ingress: they are ignored")
	}
	if !p.egress && len(p.egressRules) > 0 {
		msgs.Add("spec.egress has rules but spec.policyTypes leaves out Egress: they are ignored")
	}
}

// portProblems is np.port-without-protocol.
func portProblems(_ *Namespace, p *Policy, msgs *Messages) {
	for _, d := range directions(p) {
		for i, r := range d.rules {
			for j, po := range r.ports {
				if po.protocol == "" {
					what := "every port"
					if po.port != "" {
						what = "port " + po.port
					}
					msgs.Add("spec.%s[%d].ports[%d] (%s) names no protocol, so it means TCP only; write protocol: TCP, UDP or SCTP", d.field, i, j, what)
				}
			}
		}
	}
}

// allowsDNS reports whether egress rules of a policy in namespace ns allow
// UDP port 53 to kube-dns. An ipBlock counts (the analysis cannot know the
// DNS service's or node-local DNS's address); a peer must otherwise be able
// to select kube-dns's pods in kube-system.
func allowsDNS(ns string, rules []rule) bool {
	dnsNS := labels.Set{namespaceNameKey: dnsNamespace}
	dnsPod := labels.Set{dnsPodLabelKey: dnsPodLabelValue}
	for _, r := range rules {
		if !portsAllowDNS(r.ports) {
			continue
		}
		if len(r.peers) == 0 {
			return true
		}
		for _, pe := range r.peers {
			switch {
			case pe.ipBlock != nil:
				return true
			case pe.namespaceSelector != nil:
				if pe.namespaceSelector.Matches(dnsNS) && (pe.podSelector == nil || pe.podSelector.Matches(dnsPod)) {
					return true
				}
			case ns == dnsNamespace && pe.podSelector != nil && pe.podSelector.Matches(dnsPod):
				return true
			}
		}
	}
	return false
}

func portsAllowDNS(ports []port) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.protocol != "UDP" {
			continue
		}
		if p.port == "" || p.port == dnsPort || p.port == dnsNamedPort {
			return true
		}
		if n, err := strconv.Atoi(p.port); err == nil && p.endPort > 0 && n <= 53 && int(p.endPort) >= 53 {
			return true
		}
	}
	return false
}
