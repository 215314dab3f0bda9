package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// PodMembership passes the pod events that can change an APIRule's or a
// RateLimit's verdict: a pod that comes or goes, changes labels, or gains or
// loses its sidecar. Status updates, most of a cluster's pod events, do not
// pass, so a busy cluster does not reconcile the controllers for nothing.
func PodMembership() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return !labels.Equals(o.Labels, n.Labels) || HasSidecar(o) != HasSidecar(n)
	}}
}
