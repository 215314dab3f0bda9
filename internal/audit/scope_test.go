package audit_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/audit"
)

// requestLog records the paths of the list and watch requests the audit
// informers send the API server.
type requestLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *requestLog) RoundTrip(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodGet {
			l.mu.Lock()
			l.paths = append(l.paths, r.URL.Path)
			l.mu.Unlock()
		}
		return next.RoundTrip(r)
	})
}

// since returns the recorded paths from index i on that end in suffix.
func (l *requestLog) since(i int, suffix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, p := range l.paths[min(i, len(l.paths)):] {
		if strings.HasSuffix(p, suffix) {
			out = append(out, p)
		}
	}
	return out
}

func (l *requestLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.paths)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func configMap(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// configMapRule flags every ConfigMap.
func configMapRule() policyv1alpha1.RuleSpec {
	return policyv1alpha1.RuleSpec{
		Mode:     []policyv1alpha1.Mode{"audit"},
		Severity: "medium",
		Match:    policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "ConfigMap"}}},
		Rule:     `metadata.name != ""`,
		Message:  "configmap {{ metadata.name }} is flagged",
		Enabled:  ptr.To(true),
	}
}

func deleteOnCleanup(t *testing.T, c client.Client, o client.Object) {
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", o.GetName(), err)
		}
	})
}

// A kind only PortalRules audit is listed, watched and cached only in their
// namespaces: a tenant's PortalRule in namespace A never makes Portal watch
// namespace B's ConfigMaps, and B gets no report; a cluster-scoped kind it
// names is not watched at all. A PortalClusterRule for
// the kind switches to one cluster-wide informer and B is audited, A's
// findings kept across; when it goes, the watch narrows to A again and B's
// findings go; when the last PortalRule goes, nothing is watched.
func TestNamespacedRuleWatchesOnlyItsNamespace(t *testing.T) {
	c := cluster(t)
	nsA, nsB := namespace(t, c, "scope-a"), namespace(t, c, "scope-b")
	create(t, c, configMap(nsA, "flagged"), configMap(nsB, "flagged"))
	requests := &requestLog{}
	cfg := rest.CopyConfig(env.cfg)
	cfg.Wrap(requests.RoundTrip)
	inst := startInstance(t, instanceOptions{crRules: true, restConfig: cfg})
	informers := func(scope string) float64 {
		return inst.metric(t, "portal_audit_informers", map[string]string{"resource": "configmaps", "scope": scope})
	}
	eventually(t, 30*time.Second, "instance leads", func() (bool, error) { return inst.leader(t), nil })

	tenant := &policyv1alpha1.PortalRule{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "cm-flag"}, Spec: configMapRule()}
	create(t, c, tenant)
	deleteOnCleanup(t, c, tenant)
	waitReport(t, c, nsA, "A's ConfigMap reported", func(st reportState) bool { return st.has("cm-flag/flagged/") })
	// An object created in B after A's informer listed: if B were watched,
	// it would be evaluated and reported like the one in A created after it.
	create(t, c, configMap(nsB, "later"), configMap(nsA, "later"))
	waitReport(t, c, nsA, "A's later ConfigMap evaluated", func(st reportState) bool { return st.fail == 2 && st.has("cm-flag/later/") })
	if got := informers("namespace"); got != 1 {
		t.Errorf("namespaced configmaps informers = %v, want 1", got)
	}
	if got := informers("cluster"); got != 0 {
		t.Errorf("cluster-wide configmaps informers = %v, want 0", got)
	}
	if got := inst.metric(t, "portal_audit_informers", map[string]string{"resource": "namespaces"}); got != 0 {
		t.Errorf("namespaces informers = %v, want none for a PortalRule", got)
	}
	want := []audit.WatchScope{{Resource: corev1.SchemeGroupVersion.WithResource("configmaps"), Namespace: nsA}}
	if got := inst.layer.Source.Watches(); !slices.Equal(got, want) {
		t.Errorf("watches = %v, want %v", got, want)
	}
	for _, p := range requests.since(0, "/configmaps") {
		if p != "/api/v1/namespaces/"+nsA+"/configmaps" {
			t.Errorf("audit asked the API server for %s, want only %s's ConfigMaps", p, nsA)
		}
	}
	if st, err := readReports(t, c, nsB); err != nil || len(st.reports) != 0 {
		t.Errorf("namespace B has reports %v (err %v), want none", st.results, err)
	}

	mark := requests.len()
	platform := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: "cm-flag-" + nsB}, Spec: configMapRule()}
	platform.Spec.Match.Namespaces = &policyv1alpha1.NamespaceMatch{Include: []string{nsB}}
	create(t, c, platform)
	deleteOnCleanup(t, c, platform)
	waitReport(t, c, nsB, "B audited by the cluster rule", func(st reportState) bool {
		return st.has(platform.Name+"/flagged/") && st.has(platform.Name+"/later/")
	})
	eventually(t, 30*time.Second, "one cluster-wide informer", func() (bool, error) {
		return informers("cluster") == 1 && informers("namespace") == 0, nil
	})
	if got := requests.since(mark, "/configmaps"); !slices.Contains(got, "/api/v1/configmaps") {
		t.Errorf("audit requests for configmaps after the cluster rule: %v, want a cluster-wide list", got)
	}
	if st, err := readReports(t, c, nsA); err != nil || !st.has("cm-flag/flagged/") {
		t.Errorf("A's finding lost when the watch widened: %v (err %v)", st.results, err)
	}

	if err := c.Delete(context.Background(), platform); err != nil {
		t.Fatal(err)
	}
	waitReport(t, c, nsB, "B's findings cleared with the cluster rule", func(st reportState) bool { return st.fail == 0 })
	eventually(t, 30*time.Second, "back to A's informer only", func() (bool, error) {
		return informers("cluster") == 0 && informers("namespace") == 1, nil
	})
	waitReport(t, c, nsA, "A still reported", func(st reportState) bool { return st.has("cm-flag/flagged/") })

	if err := c.Delete(context.Background(), tenant); err != nil {
		t.Fatal(err)
	}
	waitReport(t, c, nsA, "A's findings cleared with the last PortalRule", func(st reportState) bool { return st.fail == 0 })
	eventually(t, 30*time.Second, "no configmaps informer", func() (bool, error) {
		return informers("cluster") == 0 && informers("namespace") == 0, nil
	})
}
