package engine

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// watchGatewayServices makes a waf-proxy Engine that waits for its
// Gateway's Service (TargetServiceNotFound) react when the Service appears,
// changes its ports or goes. The watch reads metadata only (the label is
// all it maps on): the reconciler still reads the Service itself without an
// informer, and the cache holds names and labels of the cluster's Services,
// not their specs.
func (r *Reconciler) watchGatewayServices(b *builder.Builder) *builder.Builder {
	svc := &metav1.PartialObjectMetadata{}
	svc.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Service"))
	gatewayService := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetLabels()[wafv1alpha1.GatewayNameLabel]
		// The waf-proxy's own Service is Portal's doing, not an upstream.
		return ok && o.GetLabels()[LabelManagedBy] != FieldOwner
	})
	return b.WatchesMetadata(svc, handler.EnqueueRequestsFromMapFunc(r.referrers(indexTarget, func(o client.Object) string {
		return o.GetLabels()[wafv1alpha1.GatewayNameLabel]
	})), builder.WithPredicates(gatewayService))
}
