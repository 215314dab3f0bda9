package manager

import (
	"context"
	"io"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// TestRuntimeLeaderLabelFollowsLeadership: a replica that starts takes a
// stale leader label off its pod (a container restarted after losing the
// lease keeps its pod); while it leads its pod carries the label; when it
// stops leading the label goes.
func TestRuntimeLeaderLabelFollowsLeadership(t *testing.T) {
	cl := shared.Cluster(t)
	c := clusterClient(t, cl, "rt-leader")
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "rt-leader", Name: "portal-1", Labels: map[string]string{RuntimeLeaderLabel: "true", "app": "portal"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "portal", Image: "registry.example/portal:1"}}}}
	must(t, c.Create(ctx, pod))
	label := func() string {
		p := &corev1.Pod{}
		must(t, c.Get(ctx, client.ObjectKeyFromObject(pod), p))
		if p.Labels["app"] != "portal" {
			t.Fatalf("the pod's other labels changed: %v", p.Labels)
		}
		return p.Labels[RuntimeLeaderLabel]
	}
	ll := &leaderLabel{c: c, ns: "rt-leader", name: "portal-1", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	must(t, ll.clear(ctx))
	if got := label(); got != "" {
		t.Fatalf("a starting replica left the stale leader label: %q", got)
	}
	leading, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = ll.Start(leading); close(done) }()
	devtest.Eventually(t, "the leader's pod labelled", func() bool { return label() == "true" })
	stop()
	<-done
	if got := label(); got != "" {
		t.Errorf("the label stayed after leadership ended: %q", got)
	}
}
