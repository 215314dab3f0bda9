package audit_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/clustercache"
)

// Audit and another layer reading pods share one informer of the cluster
// cache: one watch, two users. When audit's last rule on pods goes, audit
// releases its hold and its findings clear, but the informer keeps running
// for the other layer, whose reads still see new pods.
func TestAuditSharesTheClusterCache(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "shared")
	create(t, c, pod(ns, "first", true, nil))
	inst := startInstance(t, instanceOptions{crRules: true, sharedCache: true})
	pods := clustercache.Scope{Resource: corev1.SchemeGroupVersion.WithResource("pods"), Namespace: ns}
	lookups, err := inst.cache.Acquire(pods)
	if err != nil {
		t.Fatal(err)
	}
	defer lookups.Release()
	users := func() float64 {
		return inst.metric(t, "portal_cluster_cache_users", map[string]string{"resource": "pods", "scope": "namespace"})
	}
	informers := func() float64 {
		return inst.metric(t, "portal_cluster_cache_informers", map[string]string{"resource": "pods", "scope": "namespace"})
	}

	pr := &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-privileged"},
		Spec: policyv1alpha1.RuleSpec{
			Mode:     []policyv1alpha1.Mode{"audit"},
			Severity: "high",
			Match:    policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "Pod"}}},
			Rule:     privileged,
			Message:  "privileged",
			Enabled:  ptr.To(true),
		},
	}
	create(t, c, pr)
	waitReport(t, c, ns, "audit's finding", func(st reportState) bool { return st.fail == 1 })
	if u, i := users(), informers(); u != 2 || i != 1 {
		t.Errorf("%v users of %v pod informers, want 2 of 1", u, i)
	}
	if n := inst.metric(t, "portal_cluster_cache_watches_total", map[string]string{"resource": "pods"}); n != 1 {
		t.Errorf("%v pod watches for two layers, want 1", n)
	}

	if err := c.Delete(context.Background(), pr); err != nil {
		t.Fatal(err)
	}
	waitReport(t, c, ns, "audit's findings cleared with its rule", func(st reportState) bool { return st.fail == 0 })
	eventually(t, 30*time.Second, "audit released its hold", func() (bool, error) { return users() == 1, nil })
	if i := informers(); i != 1 {
		t.Fatalf("%v pod informers after audit let go, want 1 for the other layer", i)
	}
	create(t, c, pod(ns, "second", false, nil))
	eventually(t, 30*time.Second, "the other layer reads new pods", func() (bool, error) {
		_, ok, err := lookups.Get(ns, "second")
		return ok, err
	})

	lookups.Release()
	eventually(t, 30*time.Second, "no pod informer once both let go", func() (bool, error) { return informers() == 0, nil })
}
