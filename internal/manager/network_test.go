package manager

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// gauge is the value of the series of name in reg with label l=v.
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
					return m.GetGauge().GetValue()
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
	cfg.Audit.Sinks.ReportFormat = "none"
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
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return gauge(t, reg, "portal_network_findings", "check", "np.default-deny-missing") == 1 &&
			gauge(t, reg, "portal_findings_objects", "producer", "network") == 1, nil
	})
	if err != nil {
		t.Errorf("want one default-deny-missing finding (the team's namespace, not Portal's): findings %v, objects %v",
			gauge(t, reg, "portal_network_findings", "check", "np.default-deny-missing"), gauge(t, reg, "portal_findings_objects", "producer", "network"))
	}
	if fams := families(t, reg, "portal_audit_events_total"); len(fams) > 0 {
		t.Errorf("audit is set up with only network on: %v", fams)
	}
}
