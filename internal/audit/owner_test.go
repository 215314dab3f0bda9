package audit_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/sink"
)

// TestNodeOwnsItsWritersReports: a writer per control-plane node
// (--report-owner-node, the chart's audit log DaemonSet) writes its
// namespaced and cluster reports owned by its Node, so the garbage
// collector deletes them when the node is replaced: no other writer would
// ever adopt them. (envtest runs no garbage collector: the owner reference
// is what it acts on.) When the Node is re-created under its name, the
// writer's next start adopts its reports and leaves only the new Node as
// their owner, or the collector would delete them with the old one's.
func TestNodeOwnsItsWritersReports(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "owner-node")
	node := newNode(t, c, ns+"-cp")
	create(t, c, pod(ns, "p", true, nil),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns + "-cl", Labels: map[string]string{"portal-test": ns}}})
	rules := podRule("owned-privileged", ns, privileged, "privileged") + namespaceOwnerRule("owned-namespace-owner", ns)
	o := instanceOptions{rules: rules, reportName: "portal-runtime-" + node.Name, ownerNode: node.Name}
	inst := startInstance(t, o)
	waitOwned(t, c, ns, o.reportName, node)

	inst.stop(t)
	if err := c.Delete(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	again := newNode(t, c, node.Name)
	if again.UID == node.UID {
		t.Fatalf("re-created Node kept UID %s", node.UID)
	}
	startInstance(t, o)
	waitOwned(t, c, ns, o.reportName, again)
}

// waitOwned waits until the writer's report in ns and its cluster report
// have node, and node alone, as their owner.
func waitOwned(t *testing.T, c client.Client, ns, writer string, node *corev1.Node) {
	t.Helper()
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
	waitReport(t, c, ns, "the namespaced report owned by Node "+string(node.UID), func(st reportState) bool {
		return len(st.reports) == 1 && st.reports[0].Name == writer && reflect.DeepEqual(st.reports[0].OwnerReferences, want)
	})
	eventually(t, 30*time.Second, "the cluster report owned by Node "+string(node.UID), func() (bool, error) {
		var r reportsv1alpha2.ClusterPolicyReport
		if err := c.Get(context.Background(), client.ObjectKey{Name: writer}, &r); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return len(r.Results) == 1 && reflect.DeepEqual(r.OwnerReferences, want), nil
	})
}

// newNode creates a Node named name, deleted when the test ends.
func newNode(t *testing.T, c client.Client, name string) *corev1.Node {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	create(t, c, node)
	t.Cleanup(func() {
		_ = client.IgnoreNotFound(c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	})
	return node
}

// TestReportOwnerNodeMustExist: a writer told to tie its reports to a Node
// that does not exist (a typo, the wrong downward API field), or that it
// may not read (RBAC without get on nodes), does not start, and says which
// flag is wrong, rather than writing reports the garbage collector would
// delete at once or that no Node owns.
func TestReportOwnerNodeMustExist(t *testing.T) {
	c := cluster(t)
	node := newNode(t, c, namespace(t, c, "owner-rbac")+"-cp")
	noRights := rest.CopyConfig(env.cfg)
	noRights.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:default:no-node-rights"}
	for _, tc := range []struct {
		cfg   *rest.Config
		node  string
		cause func(error) bool
	}{
		{env.cfg, "no-such-node", apierrors.IsNotFound},
		{noRights, node.Name, apierrors.IsForbidden},
	} {
		mgr, err := ctrl.NewManager(tc.cfg, mgrOptions(""))
		if err != nil {
			t.Fatal(err)
		}
		so := sink.Defaults()
		so.Logger, so.Registerer = testLogger(), prometheus.NewRegistry()
		if err := so.Parse("--report-owner-node=" + tc.node); err != nil {
			t.Fatal(err)
		}
		_, err = sink.New(mgr, so)
		if err == nil || !tc.cause(err) || !strings.Contains(err.Error(), "--report-owner-node="+tc.node) {
			t.Errorf("report sinks for Node %s: error %v, want one naming --report-owner-node=%s", tc.node, err, tc.node)
		}
	}
}
