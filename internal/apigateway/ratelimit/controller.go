package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	networkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway/kube"
)

// Finalizer holds a RateLimit until its EnvoyFilter is deleted.
const Finalizer = "portal.io/ratelimit"

// DefaultResync is how often an unchanged RateLimit is reconciled.
const DefaultResync = 30 * time.Minute

// retryAfter is how soon a RateLimit that is not Ready is looked at again,
// unless it waits for pods, which the pod watch reports (see awaited).
const retryAfter = time.Minute

// Options configure the RateLimit controller.
type Options struct {
	Logger *slog.Logger
	// Resync is DefaultResync when zero.
	Resync time.Duration
}

// Reconciler reconciles RateLimits.
type Reconciler struct {
	client   client.Client
	scheme   *runtime.Scheme
	reporter *kube.Reporter
	opts     Options
}

// Setup adds the RateLimit controller to mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.Resync == 0 {
		o.Resync = DefaultResync
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reconciler{
		client: mgr.GetClient(), scheme: mgr.GetScheme(), opts: o,
		reporter: &kube.Reporter{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(kube.FieldOwner), Action: "Apply"},
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("ratelimit").
		For(&gatewayv1alpha1.RateLimit{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&networkingv1alpha3.EnvoyFilter{}).
		// A RateLimit that goes or changes may free a workload for another.
		Watches(&gatewayv1alpha1.RateLimit{}, handler.EnqueueRequestsFromMapFunc(r.sameNamespace)).
		// The pods it selects: the EnvoyFilter is written as soon as one
		// appears or gains its sidecar. The informer is the one the
		// reconciler reads pods through.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.selecting), builder.WithPredicates(kube.PodMembership())).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up RateLimit controller: %w", err)
	}
	return nil
}

// Reconcile brings one RateLimit's EnvoyFilter in line with it.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rl := &gatewayv1alpha1.RateLimit{}
	if err := r.client.Get(ctx, req.NamespacedName, rl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !rl.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(rl, Finalizer) {
			return reconcile.Result{}, nil
		}
		if err := r.remove(ctx, rl); err != nil {
			return reconcile.Result{}, err
		}
		controllerutil.RemoveFinalizer(rl, Finalizer)
		return reconcile.Result{}, client.IgnoreNotFound(r.client.Update(ctx, rl))
	}
	if !controllerutil.ContainsFinalizer(rl, Finalizer) {
		controllerutil.AddFinalizer(rl, Finalizer)
		if err := r.client.Update(ctx, rl); err != nil {
			return reconcile.Result{}, err
		}
	}
	res := r.apply(ctx, rl)
	if err := r.reporter.Report(ctx, rl, &rl.Status, res); err != nil {
		return reconcile.Result{}, err
	}
	if res.State != gatewayv1alpha1.StateReady {
		r.opts.Logger.Info("RateLimit not applied", "namespace", rl.Namespace, "name", rl.Name, "reason", res.Reason, "message", res.Message)
		if awaited(res.Reason) {
			return reconcile.Result{RequeueAfter: r.opts.Resync}, nil
		}
		return reconcile.Result{RequeueAfter: retryAfter}, nil
	}
	return reconcile.Result{RequeueAfter: r.opts.Resync}, nil
}

func (r *Reconciler) remove(ctx context.Context, rl *gatewayv1alpha1.RateLimit) error {
	return kube.DeleteLabelled(ctx, r.client, rl.Namespace, map[string]string{LabelRateLimit: rl.Name, LabelManagedBy: managedBy}, nil, &networkingv1alpha3.EnvoyFilterList{})
}

// apply checks rl against the cluster and writes its EnvoyFilter; a
// RateLimit that cannot be applied loses the EnvoyFilter it had.
func (r *Reconciler) apply(ctx context.Context, rl *gatewayv1alpha1.RateLimit) kube.Result {
	res, wctx := r.check(ctx, rl)
	if res != nil {
		if err := r.remove(ctx, rl); err != nil {
			res.Message += "; removing its EnvoyFilter failed: " + err.Error()
		}
		return *res
	}
	ef, err := Generate(rl, wctx)
	if err != nil {
		return kube.Result{State: gatewayv1alpha1.StateError, Reason: gatewayv1alpha1.ReasonInvalid, Message: err.Error()}
	}
	if err := kube.Apply(ctx, r.client, r.scheme, rl, ef); err != nil {
		reason := gatewayv1alpha1.ReasonApplyFailed
		if errors.Is(err, kube.ErrNameTaken) {
			reason = gatewayv1alpha1.ReasonNameTaken
		}
		return kube.Result{State: gatewayv1alpha1.StateError, Reason: reason, Message: err.Error()}
	}
	where := "the inbound requests of its pods' sidecars"
	if wctx == Gateway {
		where = "the requests of the ingress gateway"
	}
	return kube.Result{State: gatewayv1alpha1.StateReady, Reason: gatewayv1alpha1.ReasonApplied,
		Message: fmt.Sprintf("EnvoyFilter %s limits %s", ef.Name, where)}
}

// check validates rl against the cluster: its buckets, the pods it
// selects, and that no older RateLimit selects one of them.
func (r *Reconciler) check(ctx context.Context, rl *gatewayv1alpha1.RateLimit) (*kube.Result, Context) {
	errorf := func(reason, format string, args ...any) *kube.Result {
		return &kube.Result{State: gatewayv1alpha1.StateError, Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	if err := ValidateBuckets(rl); err != nil {
		return errorf(gatewayv1alpha1.ReasonInvalid, "%v", err), Sidecar
	}
	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.InNamespace(rl.Namespace), client.MatchingLabels(rl.Spec.SelectorLabels)); err != nil {
		return errorf(gatewayv1alpha1.ReasonApplyFailed, "list pods: %v", err), Sidecar
	}
	if len(pods.Items) == 0 {
		return &kube.Result{State: gatewayv1alpha1.StateWarning, Reason: gatewayv1alpha1.ReasonNoMatchingPods, Message: fmt.Sprintf(
			"no pod in namespace %s has the labels %v; the EnvoyFilter is written once one does", rl.Namespace, rl.Spec.SelectorLabels)}, Sidecar
	}
	if other, err := r.olderSelecting(ctx, rl, pods.Items); err != nil {
		return errorf(gatewayv1alpha1.ReasonApplyFailed, "list RateLimits: %v", err), Sidecar
	} else if other != "" {
		return errorf(gatewayv1alpha1.ReasonConflict,
			"RateLimit %s, which is older, already selects some of the same pods: a workload has one RateLimit; merge the buckets into it or select other pods", other), Sidecar
	}
	if isGateway(rl.Spec.SelectorLabels, pods.Items) {
		return nil, Gateway
	}
	for i := range pods.Items {
		if !kube.HasSidecar(&pods.Items[i]) {
			return errorf(gatewayv1alpha1.ReasonNoSidecar,
				"pod %s runs without an Istio sidecar, so there is no Envoy to limit its requests; enable injection and restart it", pods.Items[i].Name), Sidecar
		}
	}
	return nil, Sidecar
}

// olderSelecting names an older RateLimit of the namespace that selects
// one of pods.
func (r *Reconciler) olderSelecting(ctx context.Context, rl *gatewayv1alpha1.RateLimit, pods []corev1.Pod) (string, error) {
	list := &gatewayv1alpha1.RateLimitList{}
	if err := r.client.List(ctx, list, client.InNamespace(rl.Namespace)); err != nil {
		return "", err
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == rl.UID || !o.DeletionTimestamp.IsZero() || !older(o, rl) {
			continue
		}
		for j := range pods {
			if selects(o.Spec.SelectorLabels, pods[j].Labels) {
				return o.Name, nil
			}
		}
	}
	return "", nil
}

func older(a, b *gatewayv1alpha1.RateLimit) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

func selects(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// isGateway: Istio's ingress gateways carry one of these labels.
func isGateway(sel map[string]string, pods []corev1.Pod) bool {
	gw := func(l map[string]string) bool {
		return l["istio"] == "ingressgateway" || l["app"] == "istio-ingressgateway" || l["gateway.istio.io/managed"] != ""
	}
	if gw(sel) {
		return true
	}
	for i := range pods {
		if gw(pods[i].Labels) {
			return true
		}
	}
	return false
}

func (r *Reconciler) sameNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &gatewayv1alpha1.RateLimitList{}
	if err := r.client.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if list.Items[i].UID != obj.GetUID() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// selecting enqueues the RateLimits of the pod's namespace that select it.
func (r *Reconciler) selecting(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &gatewayv1alpha1.RateLimitList{}
	if err := r.client.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		r.opts.Logger.Error("list RateLimits for a pod event", "error", err)
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if selects(list.Items[i].Spec.SelectorLabels, obj.GetLabels()) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// awaited reports whether reason says that a RateLimit waits for pods (to
// appear, or to run a sidecar) or for an older RateLimit to go: the watches
// report both, so it is not polled for them.
func awaited(reason string) bool {
	switch reason {
	case gatewayv1alpha1.ReasonNoMatchingPods, gatewayv1alpha1.ReasonNoSidecar, gatewayv1alpha1.ReasonConflict:
		return true
	}
	return false
}
