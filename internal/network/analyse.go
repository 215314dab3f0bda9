package network

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/vilaca/portal/internal/core"
)

// world is the cluster as the analysis reads it: the live cache, or the
// manifests of `portal eval --network`. Both run the same checks through it.
type world interface {
	// namespaceLabels returns a namespace's labels; false when it does not
	// exist.
	namespaceLabels(name string) (labels.Labels, bool)
	// eachNamespace calls fn for every namespace until it returns false.
	eachNamespace(fn func(name string, l labels.Labels) bool)
	// eachPod calls fn with the labels of the pods of namespace until it
	// returns false.
	eachPod(namespace string, fn func(labels.Labels) bool)
}

// The labels kube-dns (CoreDNS) runs with in every common distribution, and
// the label the API server sets on every namespace.
const (
	dnsNamespace      = "kube-system"
	namespaceNameKey  = "kubernetes.io/metadata.name"
	dnsPodLabelKey    = "k8s-app"
	dnsPodLabelValue  = "kube-dns"
	dnsPort           = "53"
	dnsNamedPort      = "dns"
	policyAPIVersion  = "networking.k8s.io/v1"
	policyKind        = "NetworkPolicy"
	namespaceKind     = "Namespace"
	namespaceAPIGroup = "v1"
)

// analysis is one namespace's analysis in progress.
type analysis struct {
	cfg *Config
	w   world
	ns  string
	// visits counts the pods and namespaces read; past cfg.MaxPodVisits
	// the selectors left are not checked and truncated is set.
	visits    int
	truncated bool
	now       time.Time
}

// result is the findings of one namespace: on the Namespace and on each of
// its policies (an empty list clears what a previous analysis found).
type result struct {
	objects   []core.ObjectFindings
	truncated bool
	visits    int
}

// analyseNamespace runs the enabled checks on namespace ns and its policies.
// An excluded namespace, or one that no longer exists and holds no policy,
// yields empty findings for what it lists.
func analyseNamespace(cfg *Config, w world, ns string, pols []*policy) result {
	a := &analysis{cfg: cfg, w: w, ns: ns, now: time.Now()}
	nsRef := core.ResourceRef{APIVersion: namespaceAPIGroup, Kind: namespaceKind, Name: ns}
	out := make([]core.ObjectFindings, 0, len(pols)+1)
	excluded := cfg.excluded(ns)
	var nsFindings []core.Finding
	if !excluded {
		nsFindings = a.namespaceChecks(nsRef, pols)
	}
	out = append(out, core.ObjectFindings{Object: nsRef, Findings: nsFindings})
	dnsWide := a.namespaceAllowsDNS(pols)
	for _, p := range pols {
		ref := core.ResourceRef{APIVersion: policyAPIVersion, Kind: policyKind, Namespace: p.namespace, Name: p.name, UID: p.uid}
		var fs []core.Finding
		if !excluded {
			fs = a.policyChecks(ref, p, dnsWide)
		}
		out = append(out, core.ObjectFindings{Object: ref, Findings: fs})
	}
	return result{objects: out, truncated: a.truncated, visits: a.visits}
}

func (a *analysis) finding(check string, ref core.ResourceRef, msgs *messages) []core.Finding {
	if msgs.empty() || !a.cfg.enabled(check) {
		return nil
	}
	return []core.Finding{{
		Result: core.Result{
			Rule: checkRules[check], Resource: ref, Outcome: core.OutcomeFail,
			Message: msgs.String(),
		},
		FirstSeen: a.now,
	}}
}

// namespaceChecks is np.default-deny-missing.
func (a *analysis) namespaceChecks(ref core.ResourceRef, pols []*policy) []core.Finding {
	if !a.cfg.enabled(CheckDefaultDenyMissing) {
		return nil
	}
	if _, ok := a.w.namespaceLabels(a.ns); !ok {
		return nil
	}
	for _, p := range pols {
		if p.isDefaultDenyIngress() {
			return nil
		}
	}
	hasPods := false
	a.w.eachPod(a.ns, func(labels.Labels) bool {
		hasPods = true
		return false
	})
	if !hasPods {
		return nil
	}
	return a.finding(CheckDefaultDenyMissing, ref, one(
		"namespace %s has pods and no default-deny ingress NetworkPolicy (podSelector {} with policyTypes [Ingress] and no rule that allows everything): a pod no other policy selects accepts traffic from anywhere", a.ns))
}

func (a *analysis) policyChecks(ref core.ResourceRef, p *policy, dnsWide bool) []core.Finding {
	if p.invalid != "" {
		return a.finding(CheckInvalid, ref, one("%s", p.invalid))
	}
	var fs []core.Finding
	fs = append(fs, a.finding(CheckBroadCIDR, ref, a.broadCIDRs(p))...)
	if a.cfg.enabled(CheckUnreachableSelector) {
		fs = append(fs, a.finding(CheckUnreachableSelector, ref, a.unreachable(p))...)
	}
	if a.cfg.enabled(CheckPolicyWithoutTargets) && !p.selectsAll && !a.anyPod(a.ns, p.podSelector, true) {
		fs = append(fs, a.finding(CheckPolicyWithoutTargets, ref, one(
			"spec.podSelector %s selects no pod in namespace %s: the policy applies to nothing", p.podSelector, a.ns))...)
	}
	fs = append(fs, a.finding(CheckMissingPolicyTypes, ref, policyTypeProblems(p))...)
	fs = append(fs, a.finding(CheckPortWithoutProtocol, ref, portProblems(p))...)
	if p.egress && !dnsWide && !allowsDNS(p.namespace, p.egressRules) {
		fs = append(fs, a.finding(CheckEgressBlocksDNS, ref, one(
			"the policy isolates its pods for egress and neither it nor a policy selecting every pod of namespace %s allows DNS (UDP port 53) to kube-dns in %s: name resolution fails", a.ns, dnsNamespace))...)
	}
	return fs
}

func (a *analysis) broadCIDRs(p *policy) *messages {
	msgs := &messages{}
	for _, d := range directions(p) {
		for i, r := range d.rules {
			for _, pe := range r.peers {
				if pe.ipBlock == nil || len(pe.ipBlock.Except) > 0 {
					continue
				}
				if broadCIDR(pe.ipBlock.CIDR, a.cfg.BroadCIDRIPv4Prefix, a.cfg.BroadCIDRIPv6Prefix) {
					msgs.add("spec.%s[%d].%s[%d].ipBlock.cidr %s allows %s every public address in it, with no except",
						d.field, i, d.peers, pe.index, pe.ipBlock.CIDR, d.verb)
				}
			}
		}
	}
	return msgs
}

// unreachable is np.unreachable-selector: peers whose selectors are not
// empty and match nothing.
func (a *analysis) unreachable(p *policy) *messages {
	msgs := &messages{}
	for _, d := range directions(p) {
		for i, r := range d.rules {
			for _, pe := range r.peers {
				if msg := a.peerMatchesNothing(pe); msg != "" {
					msgs.add("spec.%s[%d].%s[%d] %s: the peer allows nothing", d.field, i, d.peers, pe.index, msg)
				}
			}
		}
	}
	return msgs
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

// visit charges one pod or namespace read to the budget; false, and the
// analysis truncated, once it is spent.
func (a *analysis) visit() bool {
	a.visits++
	if a.visits > a.cfg.MaxPodVisits {
		a.truncated = true
		return false
	}
	return true
}

// matchingNamespaces lists the namespaces sel matches; false when the
// budget ran out before every namespace was read. Each namespace read is
// charged like a pod: a policy of 25,000 namespaceSelector peers in a
// cluster of 1,000 namespaces otherwise read 25 million namespaces per
// analysis outside the budget, and its author retriggers the analysis by
// relabelling their own pods.
func (a *analysis) matchingNamespaces(sel labels.Selector) ([]string, bool) {
	if a.truncated {
		return nil, false
	}
	var out []string
	a.w.eachNamespace(func(name string, l labels.Labels) bool {
		if !a.visit() {
			return false
		}
		if sel.Matches(l) {
			out = append(out, name)
		}
		return true
	})
	return out, !a.truncated
}

// anyPod reports whether a pod of ns matches sel. Out of budget, it answers
// ifUnknown: the answer that raises no finding.
func (a *analysis) anyPod(ns string, sel labels.Selector, ifUnknown bool) bool {
	if a.truncated {
		return ifUnknown
	}
	found := false
	a.w.eachPod(ns, func(l labels.Labels) bool {
		if !a.visit() {
			return false
		}
		found = sel.Matches(l)
		return !found
	})
	if !found && a.truncated {
		return ifUnknown
	}
	return found
}

// direction is the ingress or egress side of a policy, for the checks that
// read both alike.
type direction struct {
	field, peers, verb string
	rules              []rule
}

func directions(p *policy) []direction {
	return []direction{
		{field: "ingress", peers: "from", verb: "traffic in from", rules: p.ingressRules},
		{field: "egress", peers: "to", verb: "traffic out to", rules: p.egressRules},
	}
}

// policyTypeProblems is np.missing-policy-types.
func policyTypeProblems(p *policy) *messages {
	if !p.declaredTypes {
		return one("spec.policyTypes is not set: the API server infers it (Ingress, and Egress only when egress rules exist), so a policy meant to deny all egress with no egress rules isolates ingress only")
	}
	msgs := &messages{}
	if !p.ingress && len(p.ingressRules) > 0 {
		msgs.add("spec.ingress has rules but spec.policyTypes leaves out Ingress: they are ignored")
	}
	if !p.egress && len(p.egressRules) > 0 {
		msgs.add("spec.egress has rules but spec.policyTypes leaves out Egress: they are ignored")
	}
	return msgs
}

// portProblems is np.port-without-protocol.
func portProblems(p *policy) *messages {
	msgs := &messages{}
	for _, d := range directions(p) {
		for i, r := range d.rules {
			for j, po := range r.ports {
				if po.protocol == "" {
					what := "every port"
					if po.port != "" {
						what = "port " + po.port
					}
					msgs.add("spec.%s[%d].ports[%d] (%s) names no protocol, so it means TCP only; write protocol: TCP, UDP or SCTP", d.field, i, j, what)
				}
			}
		}
	}
	return msgs
}

// namespaceAllowsDNS reports whether a policy selecting every pod of the
// namespace allows DNS egress, as a shared "allow-dns" policy does.
func (a *analysis) namespaceAllowsDNS(pols []*policy) bool {
	for _, p := range pols {
		if p.invalid == "" && p.selectsAll && p.egress && allowsDNS(p.namespace, p.egressRules) {
			return true
		}
	}
	return false
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

// sortPolicies orders policies by name, so findings and messages read the
// same on every run.
func sortPolicies(pols []*policy) {
	slices.SortFunc(pols, func(a, b *policy) int { return strings.Compare(a.name, b.name) })
}
