package network_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/network"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func remove(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Delete(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

func update(t *testing.T, c client.Client, o client.Object, change func()) {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
		t.Fatal(err)
	}
	change()
	if err := c.Update(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

func np(ns, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func selector(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

var (
	ingress = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egress  = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
)

// activeAlert reports whether Alertmanager holds an active alert of rule on
// the object name in ns.
func activeAlert(am *amtest.Server, ns, rule, name string) (bool, error) {
	as, err := am.Alerts(ns)
	if err != nil {
		return false, err
	}
	for _, a := range as {
		if a.Status.State == "active" && a.Labels["rule"] == rule && a.Labels["name"] == name && a.Labels["producer"] == "network" {
			return true, nil
		}
	}
	return false, nil
}

// Seed 003's verification, step by step, and one step per check that a
// live cluster can hold: each finding is in the report the API server
// returns after the change that causes it, and gone after the change that
// fixes it; the broad-cidr alert resolves in a real Alertmanager.
func TestChecksAppearAndClear(t *testing.T) {
	c := cluster(t)
	am := amtest.Start(t)
	start(t, am, network.DefaultConfig())
	ns := namespace(t, c, "np-steps")

	stepDefaultDenyMissing(t, c, ns)
	api, unreachable, untargeted := stepUnreachableSelector(t, c, ns)
	stepBroadCIDR(t, c, am, ns)
	stepEgressBlocksDNS(t, c, ns)
	stepMissingPolicyTypes(t, c, ns)
	stepCrossNamespacePeer(t, c, ns)

	// A deleted policy's findings go with it.
	waitReported(t, c, ns, unreachable, true)
	remove(t, c, api)
	waitReported(t, c, ns, unreachable, false)
	waitReported(t, c, ns, untargeted, false)
}

// stepDefaultDenyMissing: a pod in a namespace without a default-deny
// policy is reported until one exists.
func stepDefaultDenyMissing(t *testing.T, c client.Client, ns string) {
	t.Helper()
	nsKey := network.CheckDefaultDenyMissing + " Namespace/" + ns
	// A namespace with no policy and a pod: default-deny-missing.
	create(t, c, pod(ns, "web", map[string]string{"app": "web"}))
	waitReported(t, c, ns, nsKey, true)
	// A default-deny policy clears it; deleting the policy brings it back.
	deny := np(ns, "default-deny", networkingv1.NetworkPolicySpec{PolicyTypes: ingress})
	create(t, c, deny)
	waitReported(t, c, ns, nsKey, false)
	remove(t, c, deny)
	waitReported(t, c, ns, nsKey, true)
}

// stepUnreachableSelector: a policy whose selectors match no pod is
// reported until one does. It returns the policy, still unreachable, and
// the keys of its two findings.
func stepUnreachableSelector(t *testing.T, c client.Client, ns string) (api *networkingv1.NetworkPolicy, unreachable, untargeted string) {
	t.Helper()
	// A policy for role=api pods, open to role=api pods, while there is
	// none: unreachable-selector and policy-without-targets. A pod with
	// the label clears both.
	api = np(ns, "api", networkingv1.NetworkPolicySpec{
		PodSelector: *selector("role", "api"), PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: selector("role", "api")}}}},
	})
	create(t, c, api)
	unreachable = network.CheckUnreachableSelector + " NetworkPolicy/api"
	untargeted = network.CheckPolicyWithoutTargets + " NetworkPolicy/api"
	waitReported(t, c, ns, unreachable, true)
	waitReported(t, c, ns, untargeted, true)
	apiPod := pod(ns, "api", map[string]string{"role": "api"})
	create(t, c, apiPod)
	waitReported(t, c, ns, unreachable, false)
	waitReported(t, c, ns, untargeted, false)
	// Relabelling the pod away brings them back: a label change is an event
	// that matters.
	update(t, c, apiPod, func() { apiPod.Labels = map[string]string{"role": "gone"} })
	waitReported(t, c, ns, unreachable, true)
	return api, unreachable, untargeted
}

// stepBroadCIDR: egress to the whole internet is reported and alerted
// until narrowed.
func stepBroadCIDR(t *testing.T, c client.Client, am *amtest.Server, ns string) {
	t.Helper()
	// Egress to the whole internet: broad-cidr, alerted; an except clears
	// the finding and resolves the alert.
	open := np(ns, "open", networkingv1.NetworkPolicySpec{
		PodSelector: *selector("app", "web"), PolicyTypes: egress,
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}}},
	})
	create(t, c, open)
	broad := network.CheckBroadCIDR + " NetworkPolicy/open"
	waitReported(t, c, ns, broad, true)
	eventually(t, 30*time.Second, "broad-cidr alert active", func() (bool, error) {
		ok, err := activeAlert(am, ns, network.CheckBroadCIDR, "open")
		return ok && err == nil, nil
	})
	update(t, c, open, func() { open.Spec.Egress[0].To[0].IPBlock.Except = []string{"169.254.169.254/32"} })
	waitReported(t, c, ns, broad, false)
	eventually(t, 30*time.Second, "broad-cidr alert resolved", func() (bool, error) {
		ok, err := activeAlert(am, ns, network.CheckBroadCIDR, "open")
		return !ok && err == nil, nil
	})
}

// stepEgressBlocksDNS: egress isolation that blocks DNS is reported until
// DNS is allowed.
func stepEgressBlocksDNS(t *testing.T, c client.Client, ns string) {
	t.Helper()
	// Egress isolated with no rule: DNS blocked. A namespace-wide policy
	// allowing UDP 53 to kube-dns clears it.
	lock := np(ns, "lockdown", networkingv1.NetworkPolicySpec{PodSelector: *selector("app", "web"), PolicyTypes: egress})
	create(t, c, lock)
	dns := network.CheckEgressBlocksDNS + " NetworkPolicy/lockdown"
	waitReported(t, c, ns, dns, true)
	udp := ptr.To(corev1Protocol("UDP"))
	create(t, c, np(ns, "allow-dns", networkingv1.NetworkPolicySpec{
		PolicyTypes: egress,
		Egress: []networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: selector("kubernetes.io/metadata.name", "kube-system"), PodSelector: selector("k8s-app", "kube-dns")}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: udp, Port: ptr.To(intstr.FromInt32(53))}},
		}},
	}))
	waitReported(t, c, ns, dns, false)
}

// stepMissingPolicyTypes: egress rules a policy's types ignore are
// reported until the types list Egress.
func stepMissingPolicyTypes(t *testing.T, c client.Client, ns string) {
	t.Helper()
	// Egress rules under policyTypes [Ingress] are ignored:
	// missing-policy-types until Egress is listed.
	half := np(ns, "half", networkingv1.NetworkPolicySpec{
		PodSelector: *selector("app", "web"), PolicyTypes: ingress,
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}}}},
	})
	create(t, c, half)
	types := network.CheckMissingPolicyTypes + " NetworkPolicy/half"
	waitReported(t, c, ns, types, true)
	update(t, c, half, func() { half.Spec.PolicyTypes = append(ingress, networkingv1.PolicyTypeEgress) })
	waitReported(t, c, ns, types, false)
}

// stepCrossNamespacePeer: a peer in other namespaces is unreachable until
// another namespace's label and pod match it.
func stepCrossNamespacePeer(t *testing.T, c client.Client, ns string) {
	t.Helper()
	// A peer in other namespaces: unreachable until a namespace with the
	// label exists and holds a matching pod. The events are another
	// namespace's, which this namespace's peer depends on.
	team := "t" + ns[len(ns)-6:]
	cross := np(ns, "cross", networkingv1.NetworkPolicySpec{
		PodSelector: *selector("app", "web"), PolicyTypes: ingress,
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: selector("team", team), PodSelector: selector("app", "db")}}}},
	})
	create(t, c, cross)
	crossKey := network.CheckUnreachableSelector + " NetworkPolicy/cross"
	waitReported(t, c, ns, crossKey, true)
	other := namespace(t, c, "np-other")
	otherNS := &corev1.Namespace{}
	otherNS.Name = other
	update(t, c, otherNS, func() { otherNS.Labels["team"] = team })
	create(t, c, pod(other, "db", map[string]string{"app": "db"}))
	waitReported(t, c, ns, crossKey, false)
}

// A pod created in one namespace among many is analysed with its namespace
// only: the analyses counter moves by one namespace, not by the cluster's.
func TestEventAnalysesOneNamespace(t *testing.T) {
	c := cluster(t)
	const others = 30
	for i := range others {
		ns := namespace(t, c, "np-many")
		create(t, c, pod(ns, fmt.Sprintf("p%d", i), map[string]string{"app": "x"}))
		if i == 0 {
			// A policy whose peer reads other namespaces, but none
			// like the target: the target's pods do not concern it.
			create(t, c, np(ns, "gold", networkingv1.NetworkPolicySpec{PolicyTypes: ingress,
				Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: selector("tier", "gold")}}}}}))
		}
	}
	target := namespace(t, c, "np-target")
	inst := start(t, nil, network.DefaultConfig())
	settled := func() float64 {
		var last float64
		eventually(t, 20*time.Second, "analysis queue empty", func() (bool, error) {
			last = inst.counter(t, "portal_network_analyses_total")
			return inst.counter(t, "portal_network_queue_depth") == 0, nil
		})
		return last
	}
	before := settled()
	if before < others {
		t.Fatalf("first full analysis ran %v namespace analyses, want at least %d", before, others)
	}
	create(t, c, pod(target, "new", map[string]string{"app": "y"}))
	key := core.ObjectKey{APIVersion: "v1", Kind: "Namespace", Name: target}
	eventually(t, 20*time.Second, "default-deny-missing on the target namespace", func() (bool, error) {
		for _, of := range inst.pipe.Snapshot() {
			if of.Object.Key() == key && len(of.Findings) > 0 {
				return true, nil
			}
		}
		return false, nil
	})
	if delta := settled() - before; delta != 1 {
		t.Errorf("one pod created ran %v namespace analyses; want 1 (its namespace), not one per namespace (%d+) nor one per namespace that selects peers by namespace labels", delta, others)
	}
}

// portal eval --network on manifests finds what the live analyser finds on
// the same objects applied to an API server.
func TestOfflineMatchesLive(t *testing.T) {
	c := cluster(t)
	docs, err := manifest.ReadPaths([]string{"testdata/cluster.yaml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if err := c.Create(context.Background(), o); err != nil {
				t.Fatal(err)
			}
		}
	}
	state, errs := eval.LoadClusterState([]string{"testdata/cluster.yaml"}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	offline, err := network.Analyse(state, network.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := lines(offline, nil)
	if len(want) < 6 {
		t.Fatalf("offline analysis found only %v", want)
	}
	inst := start(t, nil, network.DefaultConfig())
	fixture := map[string]bool{"np-shop": true, "np-bank": true}
	var got []string
	eventually(t, 20*time.Second, "live findings equal to offline ones", func() (bool, error) {
		got = lines(inst.pipe.Snapshot(), fixture)
		return slices.Equal(got, want), nil
	})
	if !slices.Equal(got, want) {
		t.Errorf("live:\n  %s\noffline:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// lines renders findings as "Kind ns/name rule: message", sorted; with
// only set, of the namespaces it names.
func lines(ofs []core.ObjectFindings, only map[string]bool) []string {
	var out []string
	for _, of := range ofs {
		ns := of.Object.Namespace
		if of.Object.Kind == "Namespace" {
			ns = of.Object.Name
		}
		if only != nil && !only[ns] {
			continue
		}
		for _, f := range of.Findings {
			out = append(out, fmt.Sprintf("%s %s/%s %s: %s", of.Object.Kind, of.Object.Namespace, of.Object.Name, f.RuleName(), f.Message))
		}
	}
	slices.Sort(out)
	return out
}

func corev1Protocol(p string) corev1.Protocol { return corev1.Protocol(p) }

// TestLargePolicyMessageBounded: a tenant's policy of 30,000 broad ipBlocks
// (about 1 MB, stored by the API server) is one broad-cidr finding whose
// message, in the PolicyReport and in the Alertmanager alert, lists a few
// of them within network.MaxMessageBytes and counts the rest. Without the
// bound the alert carried over 3 MB, and the report cut the message at
// 1 KiB without saying how many more there were.
func TestLargePolicyMessageBounded(t *testing.T) {
	c := cluster(t)
	am := amtest.Start(t)
	start(t, am, network.DefaultConfig())
	ns := namespace(t, c, "np-large")
	const blocks = 30_000
	peers := make([]networkingv1.NetworkPolicyPeer, blocks)
	for i := range peers {
		peers[i] = networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}
	}
	create(t, c, np(ns, "wide", networkingv1.NetworkPolicySpec{
		PodSelector: *selector("app", "web"), PolicyTypes: egress,
		Egress: []networkingv1.NetworkPolicyEgressRule{{To: peers}},
	}))
	key := network.CheckBroadCIDR + " NetworkPolicy/wide"
	waitReported(t, c, ns, key, true)
	got, err := reported(c, ns)
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("; and %d more not listed", blocks-network.MaxMessageItems)
	if msg := got[key]; len(msg) > network.MaxMessageBytes || !strings.HasSuffix(msg, suffix) {
		t.Errorf("report message of %d bytes (bound %d), ending %q; want it to end %q", len(msg), network.MaxMessageBytes, msg[max(0, len(msg)-60):], suffix)
	}
	var alert amtest.Alert
	eventually(t, 30*time.Second, "broad-cidr alert active", func() (bool, error) {
		as, err := am.Alerts(ns)
		if err != nil {
			return false, nil
		}
		for _, a := range as {
			if a.Status.State == "active" && a.Labels["rule"] == network.CheckBroadCIDR && a.Labels["name"] == "wide" {
				alert = a
				return true, nil
			}
		}
		return false, nil
	})
	for k, v := range alert.Annotations {
		if len(v) > network.MaxMessageBytes {
			t.Errorf("alert annotation %s of %d bytes, bound %d", k, len(v), network.MaxMessageBytes)
		}
	}
}
