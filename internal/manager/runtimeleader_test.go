package manager

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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

// TestRuntimeLeaderLabelGoesAfterAnInterruptedLabel: leadership ends while
// the label's patch is in flight, and the API server applies it though the
// replica sees its request cancelled: the label still goes.
func TestRuntimeLeaderLabelGoesAfterAnInterruptedLabel(t *testing.T) {
	cl := shared.Cluster(t)
	c := clusterClient(t, cl, "rt-leader-cut")
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "rt-leader-cut", Name: "portal-1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "portal", Image: "registry.example/portal:1"}}}}
	must(t, c.Create(ctx, pod))
	scheme, err := Scheme()
	must(t, err)
	w, err := client.NewWithWatch(cl.Config, client.Options{Scheme: scheme})
	must(t, err)
	leading, stop := context.WithCancel(ctx)
	var patches atomic.Int32
	cut := interceptor.NewClient(w, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if patches.Add(1) > 1 {
				return c.Patch(ctx, obj, patch, opts...)
			}
			// The label's patch: applied, and leadership ends before the
			// answer is read.
			if err := c.Patch(context.WithoutCancel(ctx), obj, patch, opts...); err != nil {
				return err
			}
			stop()
			return ctx.Err()
		},
	})
	ll := &leaderLabel{c: cut, ns: "rt-leader-cut", name: "portal-1", log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan struct{})
	go func() { _ = ll.Start(leading); close(done) }()
	<-done
	p := &corev1.Pod{}
	must(t, c.Get(ctx, client.ObjectKeyFromObject(pod), p))
	if got := p.Labels[RuntimeLeaderLabel]; got != "" || patches.Load() < 2 {
		t.Errorf("after leadership ended during the label's patch: label %q, %d patches", got, patches.Load())
	}
}
