package actions_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// TestLabelAndEvictOnAuditFinding: an audit finding labels its pod and
// evicts it; the same finding again inside the rate-limit window does not
// fire again, and both attempts are in the audit log; an eviction a
// PodDisruptionBudget forbids is reported, once, not retried in a loop.
func TestLabelAndEvictOnAuditFinding(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	ns := e.namespace("label-evict")
	r := clusterRule("quarantine-root",
		spec("label", "key", "portal.io/quarantine", "value", "true", "rateLimit", "1/min"),
		spec("evict", "rateLimit", "1/min"))

	// A running, ready pod a PodDisruptionBudget protects: no disruption
	// allowed (no disruption controller has computed the budget's status,
	// so the API server refuses every eviction it covers). A pending pod
	// would be evicted whatever the budget.
	guarded := e.pod(ns, "guarded", map[string]string{"app": "db"})
	guarded.Status.Phase = corev1.PodRunning
	guarded.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := e.c.Status().Update(ctx, guarded); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptrIntstr(1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
	if err := e.c.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	e.open(r, podRef(guarded))

	devtest.Eventually(t, "the label on the guarded pod", func() bool {
		p := &corev1.Pod{}
		return e.c.Get(ctx, client.ObjectKeyFromObject(guarded), p) == nil && p.Labels["portal.io/quarantine"] == "true"
	})
	t.Cleanup(func() { dump(t, e) })
	devtest.Eventually(t, "the blocked eviction reported", func() bool { return e.count("evict", actions.ResultBlocked) == 1 })
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(guarded), &corev1.Pod{}); err != nil {
		t.Fatalf("the PDB-protected pod is gone: %v", err)
	}
	if l := e.log.lines("evict", "guarded"); len(l) != 1 || !strings.Contains(l[0]["detail"].(string), "refused") {
		t.Fatalf("audit lines of the blocked eviction: %v", l)
	}

	// An unprotected pod is evicted.
	victim := e.pod(ns, "victim", map[string]string{"app": "web"})
	e.open(r, podRef(victim))
	devtest.Eventually(t, "the victim evicted", func() bool {
		return apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKeyFromObject(victim), &corev1.Pod{}))
	})
	devtest.Eventually(t, "the eviction recorded", func() bool { return e.count("evict", actions.ResultSuccess) == 1 })

	// The guarded pod's finding clears (label removed) and opens again
	// within the minute: the label action is rate limited, not re-run.
	e.clear(podRef(guarded))
	devtest.Eventually(t, "the label removed when the finding cleared", func() bool {
		p := &corev1.Pod{}
		return e.c.Get(ctx, client.ObjectKeyFromObject(guarded), p) == nil && p.Labels["portal.io/quarantine"] == ""
	})
	e.open(r, podRef(guarded))
	devtest.Eventually(t, "the second label attempt rate limited", func() bool { return e.count("label", actions.ResultRateLimited) == 1 })
	devtest.Eventually(t, "the second eviction attempt rate limited", func() bool { return e.count("evict", actions.ResultRateLimited) == 1 })
	p := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(guarded), p); err != nil || p.Labels["portal.io/quarantine"] != "" {
		t.Fatalf("the rate-limited label was applied again: %v %v", p.Labels, err)
	}
	// Both attempts of each action are in the audit log; the blocked
	// eviction was tried once, not in a loop.
	if got := results(e.log.lines("label", "guarded")); got != "success,success,rate_limited" {
		t.Fatalf("label audit lines of the guarded pod: %s, want apply, revert, rate_limited", got)
	}
	if got := results(e.log.lines("evict", "guarded")); got != "blocked,rate_limited" {
		t.Fatalf("evict audit lines of the guarded pod: %s", got)
	}
	// And the attempt left an Event on the pod.
	devtest.Eventually(t, "an ActionBlocked event on the guarded pod", func() bool {
		evs := &corev1.EventList{}
		if e.c.List(ctx, evs, client.InNamespace(ns)) != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Name == "guarded" && ev.Reason == "ActionBlocked" {
				return true
			}
		}
		return false
	})
}

func ptrIntstr(n int) *intstr.IntOrString {
	v := intstr.FromInt(n)
	return &v
}

// TestMinHealthyReplicas: an eviction that would leave the pod's workload
// with fewer ready pods than minHealthyReplicas is refused before the
// Eviction API is asked.
func TestMinHealthyReplicas(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	ns := e.namespace("min-healthy")
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "00000000-0000-0000-0000-000000000001", Controller: boolPtr(true)}
	var pods []*corev1.Pod
	for _, n := range []string{"web-a", "web-b"} {
		p := e.pod(ns, n, nil, func(p *corev1.Pod) { p.OwnerReferences = []metav1.OwnerReference{owner} })
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := e.c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	r := clusterRule("evict-keep-two", spec("evict", "minHealthyReplicas", "2"))
	e.open(r, podRef(pods[0]))
	devtest.Eventually(t, "the guarded eviction reported", func() bool { return e.count("evict", actions.ResultBlocked) == 1 })
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(pods[0]), &corev1.Pod{}); err != nil {
		t.Fatalf("the pod was evicted below minHealthyReplicas: %v", err)
	}
	if l := e.log.lines("evict", "web-a"); len(l) != 1 || !strings.Contains(l[0]["detail"].(string), "minHealthyReplicas") {
		t.Fatalf("audit lines: %v", l)
	}
}

func boolPtr(b bool) *bool { return &b }

// TestQuarantineNetworkPolicy: patch-networkpolicy applies a deny-all policy
// selecting only the pod, and removes it (and the pod's label) when the
// finding clears.
func TestQuarantineNetworkPolicy(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	ns := e.namespace("quarantine")
	bad := e.pod(ns, "bad", map[string]string{"app": "web"})
	sibling := e.pod(ns, "sibling", map[string]string{"app": "web"})
	r := clusterRule("quarantine", spec("patch-networkpolicy"))
	e.open(r, podRef(bad))

	name := actions.QuarantineName("Pod", "bad")
	np := &networkingv1.NetworkPolicy{}
	devtest.Eventually(t, "the quarantine policy", func() bool {
		return e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, np) == nil
	})
	if len(np.Spec.Ingress) != 0 || len(np.Spec.Egress) != 0 || len(np.Spec.PolicyTypes) != 2 {
		t.Fatalf("the quarantine policy allows traffic: %+v", np.Spec)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{bad, sibling} {
		got := &corev1.Pod{}
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			t.Fatal(err)
		}
		if want := p.Name == "bad"; sel.Matches(labelsOf(got)) != want {
			t.Fatalf("policy selects %s: %v, want %v", p.Name, !want, want)
		}
	}

	e.clear(podRef(bad))
	devtest.Eventually(t, "the quarantine policy removed", func() bool {
		return apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &networkingv1.NetworkPolicy{}))
	})
	devtest.Eventually(t, "the quarantine label removed", func() bool {
		got := &corev1.Pod{}
		return e.c.Get(ctx, client.ObjectKeyFromObject(bad), got) == nil && got.Labels[actions.QuarantineLabel] == ""
	})

	// keep: true leaves the policy when the finding clears.
	kept := e.pod(ns, "kept", nil)
	e.open(clusterRule("quarantine-keep", spec("patch-networkpolicy", "keep", "true")), podRef(kept))
	keptName := actions.QuarantineName("Pod", "kept")
	devtest.Eventually(t, "the kept quarantine policy", func() bool {
		return e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: keptName}, &networkingv1.NetworkPolicy{}) == nil
	})
	e.clear(podRef(kept))
	devtest.Eventually(t, "the clear handled", func() bool {
		return e.count("patch-networkpolicy", actions.ResultSkipped) == 1
	})
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: keptName}, &networkingv1.NetworkPolicy{}); err != nil {
		t.Fatalf("keep: true policy removed: %v", err)
	}
}

func labelsOf(p *corev1.Pod) labels.Set { return labels.Set(p.Labels) }

// TestRevokeServiceAccountToken: the legacy token Secrets of the pod's
// ServiceAccount are deleted, others stay; with recreateServiceAccount the
// account gets a new UID.
func TestRevokeServiceAccountToken(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	ns := e.namespace("revoke")
	other := e.namespace("revoke-other")
	for _, n := range []string{ns, other} {
		if err := e.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: n, Name: "app"}}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(ns, name, sa string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{corev1.ServiceAccountNameKey: sa}},
			Type: corev1.SecretTypeServiceAccountToken}
		if err := e.c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	mine := token(ns, "app-token", "app")
	theirs := token(ns, "db-token", "db")
	elsewhere := token(other, "app-token", "app")
	sa := &corev1.ServiceAccount{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, sa); err != nil {
		t.Fatal(err)
	}
	oldUID := sa.UID
	otherSA := &corev1.ServiceAccount{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: other, Name: "app"}, otherSA); err != nil {
		t.Fatal(err)
	}
	pod := e.pod(ns, "leaky", nil, func(p *corev1.Pod) { p.Spec.ServiceAccountName = "app" })

	e.open(clusterRule("revoke", spec("revoke-sa-token", "recreateServiceAccount", "true")), podRef(pod))
	devtest.Eventually(t, "the token Secret deleted", func() bool {
		return apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKeyFromObject(mine), &corev1.Secret{}))
	})
	devtest.Eventually(t, "the ServiceAccount recreated", func() bool {
		got := &corev1.ServiceAccount{}
		return e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, got) == nil && got.UID != oldUID
	})
	for _, s := range []*corev1.Secret{theirs, elsewhere} {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{}); err != nil {
			t.Fatalf("Secret %s/%s of another account or namespace deleted: %v", s.Namespace, s.Name, err)
		}
	}
	// The same name in another namespace is another account: untouched.
	other2 := &corev1.ServiceAccount{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: other, Name: "app"}, other2); err != nil {
		t.Fatal(err)
	}
	if other2.UID != otherSA.UID {
		t.Fatalf("ServiceAccount %s/app was recreated (UID %s, was %s): revoke-sa-token reached another namespace", other, other2.UID, otherSA.UID)
	}
	// The attempt says what it deleted, by name (it once printed "[]" for
	// none, and a bracketed list otherwise).
	want := "deleted 1 legacy token Secrets of ServiceAccount " + ns + "/app: app-token; recreated it with UID "
	devtest.Eventually(t, "the audit line naming the deleted Secret", func() bool {
		for _, l := range e.log.lines("revoke-sa-token", "leaky") {
			if d, _ := l["detail"].(string); strings.HasPrefix(d, want) {
				return true
			}
		}
		return false
	})
}

// TestDryRun: nothing changes; the audit log says what would happen.
func TestDryRun(t *testing.T) {
	ctx := context.Background()
	e := start(t, func(o *actions.Options) { o.DryRun = true })
	ns := e.namespace("dry-run")
	p := e.pod(ns, "target", nil)
	r := clusterRule("everything", spec("label", "key", "portal.io/q", "value", "x"), spec("patch-networkpolicy"), spec("evict"))
	e.open(r, podRef(p))
	devtest.Eventually(t, "three dry-run lines", func() bool {
		return e.count("label", actions.ResultDryRun)+e.count("patch-networkpolicy", actions.ResultDryRun)+e.count("evict", actions.ResultDryRun) == 3
	})
	for _, a := range []string{"label", "patch-networkpolicy", "evict"} {
		l := e.log.lines(a, "target")
		if len(l) != 1 || !strings.HasPrefix(l[0]["detail"].(string), "would "+a) {
			t.Fatalf("%s audit lines: %v", a, l)
		}
	}
	got := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil || len(got.Labels) != 0 {
		t.Fatalf("dry-run changed the pod: %v %v", got.Labels, err)
	}
	nps := &networkingv1.NetworkPolicyList{}
	if err := e.c.List(ctx, nps, client.InNamespace(ns)); err != nil || len(nps.Items) != 0 {
		t.Fatalf("dry-run created policies: %v %v", nps.Items, err)
	}
}

// TestPerRuleDryRun: an action's dryRun only logs it; the rule's other
// actions run.
func TestPerRuleDryRun(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	ns := e.namespace("dry-run-rule")
	p := e.pod(ns, "per-rule", nil)
	e.open(clusterRule("mixed", spec("label", "key", "portal.io/live", "value", "y"), spec("evict", "dryRun", "true")), podRef(p))
	devtest.Eventually(t, "the live label", func() bool {
		got := &corev1.Pod{}
		return e.c.Get(ctx, client.ObjectKeyFromObject(p), got) == nil && got.Labels["portal.io/live"] == "y"
	})
	devtest.Eventually(t, "the dry-run eviction logged", func() bool { return e.count("evict", actions.ResultDryRun) == 1 })
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}); err != nil {
		t.Fatalf("the dry-run eviction evicted: %v", err)
	}
}

// TestAdmissionVerdict: a verdict handed over by admission runs the rule's
// admission actions on the leader; the same verdict again within the
// deduplication window does not.
func TestAdmissionVerdict(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	ns := e.namespace("admission-verdict")
	p := e.pod(ns, "admitted", nil)
	r := clusterRule("warned", spec("label", "key", "portal.io/warned", "value", "yes"), core.ActionSpec{Type: "evict", Modes: []core.Mode{core.ModeAudit}})
	r.Modes = []core.Mode{core.ModeAdmission}
	v := core.Verdict{Result: core.Result{Rule: r, Resource: podRef(p), Outcome: core.OutcomeFail}, Operation: "CREATE", Observed: time.Now()}
	devtest.Eventually(t, "the verdict taken", func() bool {
		e.eng.Offer(v) // dropped as not_leader until the engine runs
		return len(e.log.lines("label", "admitted")) > 0
	})
	devtest.Eventually(t, "the label", func() bool {
		got := &corev1.Pod{}
		return e.c.Get(ctx, client.ObjectKeyFromObject(p), got) == nil && got.Labels["portal.io/warned"] == "yes"
	})
	e.eng.Offer(v)
	devtest.Eventually(t, "the repeat deduplicated", func() bool { return e.count("label", actions.ResultDuplicate) >= 1 })
	if n := len(e.log.lines("label", "admitted")); n != 1 {
		t.Fatalf("label ran %d times for one verdict and its repeat", n)
	}
	if n := len(e.log.lines("evict", "admitted")); n != 0 {
		t.Fatalf("an audit-only action ran on an admission verdict")
	}
}
