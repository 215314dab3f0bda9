package manager

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gauge is the value of the gauge or counter series of name in reg with
// label l=v.
func gauge(t *testing.T, reg *prometheus.Registry, name, l, v string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == l && lp.GetValue() == v {
					return metricValue(m)
				}
			}
		}
	}
	return 0
}

// With --network alone, the analyser gets its informers from the manager's
// cluster cache and publishes into a findings pipeline of its own as
// producer "network": a namespace with a pod and no policy is flagged, and
// Portal's own namespace, with a pod too, is not.
func TestNetworkLayer(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	c, err := client.New(cl.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, reg, _ := layerConfig(t, "layers-network")
	cfg.Namespace = "portal-network-test"
	cfg.Network.Enabled = true
	if err := cfg.Sinks.Parse("--report-format=wgpolicyk8s"); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{cfg.Namespace, "network-layer-team"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	runUntilReady(t, cl, cfg)
	// Other tests of this package leave namespaces with pods behind, so
	// the findings are read per namespace from the ClusterPolicyReport.
	flagged := func(ns string) bool {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(schema.GroupVersionKind{Group: "wgpolicyk8s.io", Version: "v1alpha2", Kind: "ClusterPolicyReportList"})
		if err := c.List(ctx, &list); err != nil {
			return false
		}
		for _, r := range list.Items {
			results, _, _ := unstructured.NestedSlice(r.Object, "results")
			for _, res := range results {
				m, _ := res.(map[string]any)
				refs, _, _ := unstructured.NestedSlice(m, "resources")
				if m["policy"] != "np.default-deny-missing" || m["source"] != "portal-network" || len(refs) != 1 {
					continue
				}
				if ref, _ := refs[0].(map[string]any); ref["kind"] == "Namespace" && ref["name"] == ns {
					return true
				}
			}
		}
		return false
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return flagged("network-layer-team") && gauge(t, reg, "portal_findings_objects", "producer", "network") >= 1, nil
	})
	if err != nil {
		t.Fatalf("the team's namespace has no default-deny-missing finding in the ClusterPolicyReport: %v", err)
	}
	if flagged(cfg.Namespace) {
		t.Errorf("Portal's own namespace %s is flagged", cfg.Namespace)
	}
	if fams := families(t, reg, "portal_audit_events_total"); len(fams) > 0 {
		t.Errorf("audit is set up with only network on: %v", fams)
	}
}
