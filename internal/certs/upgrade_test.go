package certs

import (
	"context"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// TestReplicasReadyUnderALeaderWithoutTheLayer is `helm upgrade --set
// waf.enabled=true`: an old replica without the layer that owns the
// certificate holds the Lease, and the new replicas of the rolling update
// must still become ready (the rollout waits for them before it stops the
// leader). Two of them start at once: exactly one CA must win.
func TestReplicasReadyUnderALeaderWithoutTheLayer(t *testing.T) {
	ns := newNamespace(t)
	const lease = "portal"
	old := startWithoutCertificates(t, ns, lease)
	eventually(t, "the old replica leads", func() bool {
		select {
		case <-old.Elected():
			return true
		default:
			return false
		}
	})

	opts := selfOptions(ns)
	a, b := start(t, opts, lease), start(t, opts, lease)
	eventually(t, "both new replicas ready while the old one leads", func() bool { return a.c.Ready() && b.c.Ready() })
	sec := secretBundle(t, ns)
	if sec == nil {
		t.Fatal("the new replicas are ready but the Secret holds no servable certificate")
	}
	eventually(t, "both serve the Secret's certificate", func() bool {
		return sec.Serving.Leaf.Equal(a.served()) && sec.Serving.Leaf.Equal(b.served())
	})
	for _, r := range []*replica{a, b} {
		select {
		case <-r.mgr.Elected():
			t.Fatal("a new replica was elected: the test did not keep the old leader")
		default:
		}
	}
	if n := a.metrics.renewals() + b.metrics.renewals(); n != 1 {
		t.Errorf("the new replicas wrote the Secret %v times together, want exactly one creation", n)
	}
}

// startWithoutCertificates runs a leader-elected manager with no
// certificate controller, as a replica from before the layer was enabled.
func startWithoutCertificates(t *testing.T, ns, lease string) ctrl.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(env.cfg, ctrl.Options{
		Scheme:                        env.scheme,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                true,
		LeaderElectionID:              lease,
		LeaderElectionNamespace:       ns,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("old manager: %v", err)
		}
	})
	return mgr
}
