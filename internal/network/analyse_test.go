package network

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/manifest"
)

// loadStatic reads manifests as `portal eval` does.
func loadStatic(t *testing.T, paths ...string) *clustercache.Static {
	t.Helper()
	docs, err := manifest.ReadPaths(paths, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b clustercache.StaticBuilder
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if err := b.Add(o, d.Path); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.Build()
}

// keys lists "Kind/namespace/name rule" of every finding, sorted.
func keys(ofs []core.ObjectFindings) []string {
	var out []string
	for _, of := range ofs {
		for _, f := range of.Findings {
			out = append(out, fmt.Sprintf("%s/%s/%s %s", of.Object.Kind, of.Object.Namespace, of.Object.Name, f.RuleName()))
		}
	}
	slices.Sort(out)
	return out
}

func TestAnalyseManifests(t *testing.T) {
	got, err := Analyse(loadStatic(t, "testdata/cluster.yaml", "testdata/missing.yaml"), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Namespace//np-shop np.default-deny-missing",
		"NetworkPolicy/np-draft/dns-tcp-only np.egress-blocks-dns",
		"NetworkPolicy/np-draft/dns-tcp-only np.missing-policy-types",
		"NetworkPolicy/np-draft/dns-tcp-only np.port-without-protocol",
		"NetworkPolicy/np-shop/api np.missing-policy-types",
		"NetworkPolicy/np-shop/api np.policy-without-targets",
		"NetworkPolicy/np-shop/db np.egress-blocks-dns",
		"NetworkPolicy/np-shop/db np.unreachable-selector",
		"NetworkPolicy/np-shop/web-egress np.broad-cidr",
	}
	if g := keys(got); !slices.Equal(g, want) {
		t.Errorf("findings:\n  %s\nwant:\n  %s", strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
	for _, of := range got {
		for _, f := range of.Findings {
			if f.Category() != "Network Policies" {
				t.Errorf("%s on %s: category %q, want Network Policies", f.RuleName(), of.Object.Name, f.Category())
			}
			if f.RuleName() == CheckUnreachableSelector {
				// Both peers that match nothing, and not the one that
				// matches the ledger pod of np-bank.
				for _, s := range []string{"from[0] podSelector app=api", "from[1] namespaceSelector team=ghost"} {
					if !strings.Contains(f.Message, s) {
						t.Errorf("unreachable-selector message %q does not name %q", f.Message, s)
					}
				}
				if strings.Contains(f.Message, "from[2]") {
					t.Errorf("unreachable-selector message %q names the reachable peer", f.Message)
				}
			}
		}
	}
}

// Checks left out of the configuration and excluded namespaces raise
// nothing.
func TestAnalyseConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Checks = []string{CheckBroadCIDR}
	cfg.ExcludeNamespaces = append(cfg.ExcludeNamespaces, "np-dr*")
	got, err := Analyse(loadStatic(t, "testdata/cluster.yaml", "testdata/missing.yaml"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if g, want := keys(got), []string{"NetworkPolicy/np-shop/web-egress np.broad-cidr"}; !slices.Equal(g, want) {
		t.Errorf("findings %v, want %v", g, want)
	}
	bad := DefaultConfig()
	bad.Checks = []string{"np.nope"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--network-checks") {
		t.Errorf("unknown check: error %v, want one naming --network-checks", err)
	}
}

func TestBroadCIDR(t *testing.T) {
	for cidr, want := range map[string]bool{
		"0.0.0.0/0": true, "::/0": true, "8.0.0.0/8": true, "8.0.0.0/9": false,
		"10.0.0.0/8": false, "192.168.0.0/16": false, "fc00::/7": false, "2001::/16": true,
		"2001:db8::/48": false, "not-a-cidr": false, "::ffff:0.0.0.0/96": true,
	} {
		if got := broadCIDR(cidr, DefaultBroadCIDRIPv4Prefix, DefaultBroadCIDRIPv6Prefix); got != want {
			t.Errorf("broadCIDR(%s) = %v, want %v", cidr, got, want)
		}
	}
}

// manyPods is a namespace of n pods labelled app=i.
type manyPods struct {
	ns     string
	n      int
	visits int
}

func (m *manyPods) namespaceLabels(name string) (labels.Labels, bool) {
	return labels.Set{namespaceNameKey: name}, name == m.ns
}
func (m *manyPods) eachNamespace(fn func(string, labels.Labels) bool) {
	fn(m.ns, labels.Set{namespaceNameKey: m.ns})
}
func (m *manyPods) eachPod(ns string, fn func(labels.Labels) bool) {
	if ns != m.ns {
		return
	}
	for i := range m.n {
		m.visits++
		if !fn(labels.Set{"app": fmt.Sprint(i)}) {
			return
		}
	}
}

// A tenant's many policies, each with peers that match none of its many
// pods, would make one analysis read pods × peers labels: the budget stops
// it, and the peers left unchecked raise no finding (no false positive).
func TestAnalysisBudget(t *testing.T) {
	const pods, policies = 2000, 200
	var pols []*Policy
	for i := range policies {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("p%d", i)}}
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "0"}}
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "none"}}},
		}}}
		pols = append(pols, newPolicy(np))
	}
	cfg := DefaultConfig()
	cfg.MaxPodVisits = 10_000
	w := &manyPods{ns: "tenant", n: pods}
	res := analyseNamespace(&cfg, w, "tenant", pols, time.Time{})
	if !res.truncated {
		t.Fatal("analysis of 200 unreachable peers over 2,000 pods was not truncated")
	}
	if w.visits > cfg.MaxPodVisits+pods {
		t.Errorf("analysis read %d pods, budget %d", w.visits, cfg.MaxPodVisits)
	}
	unreachable := 0
	for _, of := range res.objects {
		for _, f := range of.Findings {
			if f.RuleName() == CheckUnreachableSelector {
				unreachable++
			}
		}
	}
	if unreachable == 0 || unreachable >= policies {
		t.Errorf("%d of %d policies flagged unreachable: want the ones checked within the budget only", unreachable, policies)
	}
}

// manyNamespaces is a cluster of n namespaces labelled team=i, and one
// tenant namespace of one pod app=0; it counts what the analysis reads.
type manyNamespaces struct {
	tenant                     string
	n                          int
	namespaceVisits, podVisits int
}

func (m *manyNamespaces) namespaceLabels(name string) (labels.Labels, bool) {
	return labels.Set{namespaceNameKey: name}, true
}
func (m *manyNamespaces) eachNamespace(fn func(string, labels.Labels) bool) {
	for i := range m.n {
		m.namespaceVisits++
		name := fmt.Sprintf("ns%d", i)
		if !fn(name, labels.Set{namespaceNameKey: name, "team": fmt.Sprint(i)}) {
			return
		}
	}
}
func (m *manyNamespaces) eachPod(ns string, fn func(labels.Labels) bool) {
	if ns == m.tenant {
		m.podVisits++
		fn(labels.Set{"app": "0"})
	}
}

// A tenant's policies of thousands of namespaceSelector peers that match
// no namespace made one analysis read every namespace once per peer,
// outside the budget (25,000 peers and 1,000 namespaces: 3.75 s, retriggered
// by relabelling the tenant's own pods). Namespaces read are charged like
// pods, and the peers left unchecked raise no finding.
func TestNamespaceWalkWithinBudget(t *testing.T) {
	const namespaces, policies = 1000, 2000
	var pols []*Policy
	for i := range policies {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("p%04d", i)}}
		np.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "0"}}
		np.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ghost"}}},
		}}}
		pols = append(pols, newPolicy(np))
	}
	cfg := DefaultConfig()
	cfg.MaxPodVisits = 10_000
	w := &manyNamespaces{tenant: "tenant", n: namespaces}
	res := analyseNamespace(&cfg, w, "tenant", pols, time.Time{})
	if !res.truncated {
		t.Fatal("analysis of 2,000 namespaceSelector peers over 1,000 namespaces was not truncated")
	}
	// The budget, plus the read that finds it spent and the one pod the
	// default-deny check reads to know the namespace has any.
	if read := w.namespaceVisits + w.podVisits; read > cfg.MaxPodVisits+2 {
		t.Errorf("analysis read %d namespaces and %d pods, budget %d", w.namespaceVisits, w.podVisits, cfg.MaxPodVisits)
	}
	unreachable := 0
	for _, of := range res.objects {
		for _, f := range of.Findings {
			if f.RuleName() == CheckUnreachableSelector {
				unreachable++
			}
		}
	}
	if unreachable == 0 || unreachable >= policies {
		t.Errorf("%d of %d policies flagged unreachable: want the ones checked within the budget only", unreachable, policies)
	}
}

// A tenant writes the policy a message describes: 40,000 broad ipBlocks
// (1.3 MB) made a 4.7 MB message, and a selector of hundreds of labels one
// item of tens of KB. A message lists MaxMessageItems problems, each cut to
// MaxMessageItemBytes, within MaxMessageBytes, and counts the rest.
func TestFindingMessagesBounded(t *testing.T) {
	const blocks = 40_000
	wide := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "wide"}}
	wide.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "0"}}
	wide.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	var peers []networkingv1.NetworkPolicyPeer
	for i := range blocks {
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("%d.0.0.0/8", 1+i%2)}})
	}
	wide.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: peers}}

	long := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "long"}}
	long.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "0"}}
	long.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	sel := map[string]string{}
	for i := range 500 {
		sel[fmt.Sprintf("k%03d-%s", i, strings.Repeat("x", 56))] = strings.Repeat("v", 63)
	}
	var from []networkingv1.NetworkPolicyPeer
	for range 50 {
		from = append(from, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: sel}})
	}
	long.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: from}}

	cfg := DefaultConfig()
	res := analyseNamespace(&cfg, &manyPods{ns: "tenant", n: 1}, "tenant", []*Policy{newPolicy(wide), newPolicy(long)}, time.Time{})
	want := map[string]string{
		"wide " + CheckBroadCIDR:           fmt.Sprintf("and %d more not listed", blocks-MaxMessageItems),
		"long " + CheckUnreachableSelector: "more not listed",
	}
	for _, of := range res.objects {
		for _, f := range of.Findings {
			key := of.Object.Name + " " + f.RuleName()
			if len(f.Message) > MaxMessageBytes {
				t.Errorf("%s: message of %d bytes, bound %d", key, len(f.Message), MaxMessageBytes)
			}
			if s, ok := want[key]; ok {
				if !strings.HasSuffix(f.Message, s) {
					t.Errorf("%s: message ends %q, want it to end %q", key, f.Message[max(0, len(f.Message)-80):], s)
				}
				delete(want, key)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("findings not raised: %v", want)
	}
}
