package kube_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/vilaca/portal/internal/apigateway/kube"
)

// TestPodMembership: a pod's status updates, most of a cluster's pod
// events and any tenant's to make at will, wake no APIRule or RateLimit;
// a change of labels or of the sidecar does.
func TestPodMembership(t *testing.T) {
	base := func() *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	}
	base0 := base()
	base0.Labels = map[string]string{"app": "web"}

	status := base0.DeepCopy()
	status.Status.Phase = corev1.PodRunning
	status.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	status.Annotations = map[string]string{"noise": "1"}

	relabelled := base0.DeepCopy()
	relabelled.Labels["app"] = "api"

	sidecar := base0.DeepCopy()
	sidecar.Spec.Containers = append(sidecar.Spec.Containers, corev1.Container{Name: "istio-proxy"})

	p := kube.PodMembership()
	for _, c := range []struct {
		name string
		new  *corev1.Pod
		want bool
	}{
		{"status and annotations", status, false},
		{"labels", relabelled, true},
		{"sidecar", sidecar, true},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: base0, ObjectNew: c.new}); got != c.want {
			t.Errorf("%s: passes %v, want %v", c.name, got, c.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: base0}) || !p.Delete(event.DeleteEvent{Object: base0}) {
		t.Error("a pod that comes or goes must pass")
	}
}
