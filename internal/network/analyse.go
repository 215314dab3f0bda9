package network

import (
	"slices"
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
	// l is valid during the call only (the live world passes one view of
	// every namespace's labels in turn).
	eachNamespace(fn func(name string, l labels.Labels) bool)
	// eachPod calls fn with the labels of the pods of namespace until it
	// returns false; they are valid during the call only.
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

// analyseNamespace runs the enabled checks on namespace ns and its policies
// at time now. An excluded namespace, or one that no longer exists and
// holds no policy, yields empty findings for what it lists.
func analyseNamespace(cfg *Config, w world, ns string, pols []*Policy, now time.Time) result {
	a := &analysis{cfg: cfg, w: w, ns: ns, now: now}
	nsRef := core.ResourceRef{APIVersion: namespaceAPIGroup, Kind: namespaceKind, Name: ns}
	out := make([]core.ObjectFindings, 0, len(pols)+1)
	excluded := cfg.excluded(ns)
	view := &Namespace{a: a}
	for _, p := range pols {
		if p.invalid == "" {
			view.policies = append(view.policies, p)
		}
	}
	var nsFindings []core.Finding
	if !excluded {
		for _, c := range registry {
			if c.Namespace != nil && cfg.enabled(c.Name) {
				m := &Messages{}
				c.Namespace(view, m)
				nsFindings = append(nsFindings, a.finding(c.Name, nsRef, m)...)
			}
		}
	}
	out = append(out, core.ObjectFindings{Object: nsRef, Findings: nsFindings})
	for _, p := range pols {
		ref := core.ResourceRef{APIVersion: policyAPIVersion, Kind: policyKind, Namespace: p.namespace, Name: p.name, UID: p.uid}
		var fs []core.Finding
		if !excluded {
			fs = a.policyFindings(view, ref, p)
		}
		out = append(out, core.ObjectFindings{Object: ref, Findings: fs})
	}
	return result{objects: out, truncated: a.truncated, visits: a.visits}
}

// policyFindings runs the enabled policy checks, in registration order, on
// one policy; an unreadable one gets np.invalid-policy alone.
func (a *analysis) policyFindings(view *Namespace, ref core.ResourceRef, p *Policy) []core.Finding {
	if p.invalid != "" {
		return a.finding(CheckInvalid, ref, one("%s", p.invalid))
	}
	var fs []core.Finding
	for _, c := range registry {
		if c.Policy != nil && a.cfg.enabled(c.Name) {
			m := &Messages{}
			c.Policy(view, p, m)
			fs = append(fs, a.finding(c.Name, ref, m)...)
		}
	}
	return fs
}

func (a *analysis) finding(check string, ref core.ResourceRef, msgs *Messages) []core.Finding {
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

// sortPolicies orders policies by name, so findings and messages read the
// same on every run.
func sortPolicies(pols []*Policy) {
	slices.SortFunc(pols, func(a, b *Policy) int { return strings.Compare(a.name, b.name) })
}
