package apirule

import (
	"context"
	"fmt"
	"slices"
	"strings"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway/kube"
)

// Field indexes of APIRules: what they wait for, so that the object's
// arrival finds them without a scan of every APIRule.
const (
	// indexGateway is spec.gateway, "namespace/name".
	indexGateway = "spec.gateway"
	// indexServices are the names of the Services of its own namespace
	// the APIRule forwards to (another namespace's is refused anyway).
	indexServices = "spec.services"
)

// index registers the field indexes the watches map through. ctx only
// bounds the wait for the APIRule informer.
func index(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &gatewayv1alpha1.APIRule{}, indexGateway, func(o client.Object) []string {
		return []string{o.(*gatewayv1alpha1.APIRule).Spec.Gateway}
	}); err != nil {
		return fmt.Errorf("index APIRules by gateway: %w", err)
	}
	if err := idx.IndexField(ctx, &gatewayv1alpha1.APIRule{}, indexServices, func(o client.Object) []string {
		return serviceNames(o.(*gatewayv1alpha1.APIRule))
	}); err != nil {
		return fmt.Errorf("index APIRules by Service: %w", err)
	}
	return nil
}

// serviceNames are the distinct names of the Services of api's namespace
// it forwards to.
func serviceNames(api *gatewayv1alpha1.APIRule) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s *gatewayv1alpha1.Service) {
		if s == nil || (s.Namespace != nil && *s.Namespace != api.Namespace) || seen[s.Name] {
			return
		}
		seen[s.Name] = true
		out = append(out, s.Name)
	}
	add(api.Spec.Service)
	for i := range api.Spec.Rules {
		add(api.Spec.Rules[i].Service)
	}
	return out
}

// watchAwaited adds the watches on what an APIRule waits for: its Istio
// Gateway, its Services, the pods behind them (a pod that gains its
// sidecar, or a new pod without one), and the VirtualServices that hold its
// hosts. The informers are those the reconcilers already read through, so
// the watches cost no memory beyond the handlers.
func (r *Reconciler) watchAwaited(b *builder.Builder) *builder.Builder {
	return b.
		Watches(&networkingv1.Gateway{}, handler.EnqueueRequestsFromMapFunc(r.onGateway)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.onService)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.onPod), builder.WithPredicates(kube.PodMembership())).
		Watches(&networkingv1.VirtualService{}, handler.EnqueueRequestsFromMapFunc(r.onVirtualService))
}

// onVirtualService enqueues the APIRules whose hosts a VirtualService
// serves, or may serve: one refused with HostInUse takes the host when that
// VirtualService goes or drops it. Generated ones are not skipped: their
// labels are no proof (anyone who may write a VirtualService can copy
// them), and they change only when their APIRule does. A short host is
// completed only by the reconcile, so an APIRule with one is always
// enqueued.
func (r *Reconciler) onVirtualService(ctx context.Context, o client.Object) []reconcile.Request {
	vs, ok := o.(*networkingv1.VirtualService)
	if !ok {
		return nil
	}
	rules := &gatewayv1alpha1.APIRuleList{}
	if err := r.client.List(ctx, rules, client.UnsafeDisableDeepCopy); err != nil {
		r.opts.Logger.Error("list APIRules for a VirtualService event", "error", err)
		return nil
	}
	var out []reconcile.Request
	for i := range rules.Items {
		api := &rules.Items[i]
		if slices.ContainsFunc(api.Spec.Hosts, func(h gatewayv1alpha1.Host) bool {
			host := strings.ToLower(string(h))
			if !strings.Contains(host, ".") {
				return true
			}
			return slices.ContainsFunc(vs.Spec.Hosts, func(theirs string) bool {
				return hostsOverlap(host, strings.ToLower(theirs))
			})
		}) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(api)})
		}
	}
	return out
}

// referring lists the APIRules matching opts as requests.
func (r *Reconciler) referring(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	list := &gatewayv1alpha1.APIRuleList{}
	if err := r.client.List(ctx, list, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		r.opts.Logger.Error("list APIRules for a watch event", "error", err)
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}

// onGateway enqueues the APIRules on the gateway.
func (r *Reconciler) onGateway(ctx context.Context, o client.Object) []reconcile.Request {
	return r.referring(ctx, client.MatchingFields{indexGateway: o.GetNamespace() + "/" + o.GetName()})
}

// onService enqueues the APIRules of the Service's namespace that forward
// to it.
func (r *Reconciler) onService(ctx context.Context, o client.Object) []reconcile.Request {
	return r.referring(ctx, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexServices: o.GetName()})
}

// onPod enqueues the APIRules of the pod's namespace that forward to a
// Service selecting it. A namespace without APIRules costs one cache list.
func (r *Reconciler) onPod(ctx context.Context, o client.Object) []reconcile.Request {
	list := &gatewayv1alpha1.APIRuleList{}
	if err := r.client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		r.opts.Logger.Error("list APIRules for a pod event", "error", err)
		return nil
	}
	// selects memoises, per Service name, whether it selects the pod.
	selects := map[string]bool{}
	var out []reconcile.Request
	for i := range list.Items {
		api := &list.Items[i]
		for _, name := range serviceNames(api) {
			sel, known := selects[name]
			if !known {
				sel = r.serviceSelects(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: name}, o.GetLabels())
				selects[name] = sel
			}
			if sel {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(api)})
				break
			}
		}
	}
	return out
}

// serviceSelects reports whether the Service exists and its selector
// matches podLabels.
func (r *Reconciler) serviceSelects(ctx context.Context, key types.NamespacedName, podLabels map[string]string) bool {
	svc := &corev1.Service{}
	if err := r.client.Get(ctx, key, svc); err != nil {
		if !apierrors.IsNotFound(err) {
			r.opts.Logger.Debug("read Service for a pod event", "service", key.String(), "error", err)
		}
		return false
	}
	return len(svc.Spec.Selector) > 0 && labels.SelectorFromValidatedSet(svc.Spec.Selector).Matches(labels.Set(podLabels))
}

// awaited reports whether reason says that an APIRule waits for an object
// one of the watches above reports: it is not polled for it.
func awaited(reason string) bool {
	switch reason {
	case gatewayv1alpha1.ReasonGatewayNotFound, gatewayv1alpha1.ReasonServiceNotFound, gatewayv1alpha1.ReasonNoSidecar,
		gatewayv1alpha1.ReasonHostInUse:
		return true
	}
	return false
}
