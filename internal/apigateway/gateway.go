package apigateway

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway/apirule"
	"github.com/vilaca/portal/internal/apigateway/kube"
)

// LabelAPIGateway names the APIGateway an Istio Gateway belongs to.
const LabelAPIGateway = "gateway.portal.io/apigateway"

// DefaultGatewayResync is how often an unchanged APIGateway is reconciled,
// as the anchor does (10 hours).
const DefaultGatewayResync = 10 * time.Hour

// blockedRetry is how soon a deletion blocked by users of the gateway is
// looked at again, on top of the watches that notice them going.
const blockedRetry = 30 * time.Second

// maxBlocking is the most blocking resources the status lists.
const maxBlocking = 100

// gatewayReconciler reconciles APIGateways.
type gatewayReconciler struct {
	client   client.Client
	scheme   *runtime.Scheme
	recorder events.EventRecorder
	log      *slog.Logger
	resync   time.Duration
}

func setupGateway(mgr ctrl.Manager, log *slog.Logger, resync time.Duration) error {
	r := &gatewayReconciler{
		client: mgr.GetClient(), scheme: mgr.GetScheme(), log: log, resync: resync,
		recorder: mgr.GetEventRecorder(kube.FieldOwner),
	}
	all := handler.EnqueueRequestsFromMapFunc(r.allGateways)
	err := ctrl.NewControllerManagedBy(mgr).
		Named("apigateway").
		For(&gatewayv1alpha1.APIGateway{}).
		Owns(&networkingv1.Gateway{}).
		// Which APIGateway is the oldest changes when one comes or goes,
		// and a blocked deletion goes on when the gateway's users go.
		Watches(&gatewayv1alpha1.APIGateway{}, all).
		Watches(&gatewayv1alpha1.APIRule{}, all).
		Watches(&gatewayv1alpha1.RateLimit{}, all).
		Watches(&networkingv1.VirtualService{}, all).
		Complete(r)
	if err != nil {
		return fmt.Errorf("set up APIGateway controller: %w", err)
	}
	return nil
}

func (r *gatewayReconciler) allGateways(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &gatewayv1alpha1.APIGatewayList{}
	if err := r.client.List(ctx, list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		out[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return out
}

// oldest is the APIGateway that is reconciled: the first created (name
// breaks ties), also while it is being deleted, so that its deletion stays
// blocked while its gateway is in use.
func oldest(items []gatewayv1alpha1.APIGateway) *gatewayv1alpha1.APIGateway {
	var best *gatewayv1alpha1.APIGateway
	for i := range items {
		g := &items[i]
		if best == nil || better(g, best) {
			best = g
		}
	}
	return best
}

func better(a, b *gatewayv1alpha1.APIGateway) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// Reconcile runs the oldest APIGateway's Istio Gateway and keeps the others
// in state Warning.
func (r *gatewayReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	g := &gatewayv1alpha1.APIGateway{}
	if err := r.client.Get(ctx, req.NamespacedName, g); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	list := &gatewayv1alpha1.APIGatewayList{}
	if err := r.client.List(ctx, list); err != nil {
		return reconcile.Result{}, err
	}
	if o := oldest(list.Items); o != nil && o.UID != g.UID && !g.DeletionTimestamp.IsZero() {
		// A deleted APIGateway that is not in charge has nothing to undo.
		return reconcile.Result{}, r.removeFinalizer(ctx, g)
	} else if o != nil && o.UID != g.UID {
		return reconcile.Result{}, r.report(ctx, g, gatewayv1alpha1.StateWarning, gatewayv1alpha1.ReasonOlderAPIGatewayExists,
			fmt.Sprintf("APIGateway %s is older and is the one reconciled; this one does nothing: delete it", o.Name), nil)
	}
	if !g.DeletionTimestamp.IsZero() {
		return r.delete(ctx, g)
	}
	if !controllerutil.ContainsFinalizer(g, gatewayv1alpha1.FinalizerAPIGateway) {
		controllerutil.AddFinalizer(g, gatewayv1alpha1.FinalizerAPIGateway)
		if err := r.client.Update(ctx, g); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := kube.Apply(ctx, r.client, r.scheme, g, istioGateway(g)); err != nil {
		if rerr := r.report(ctx, g, gatewayv1alpha1.StateError, gatewayv1alpha1.ReasonApplyFailed, err.Error(), nil); rerr != nil {
			return reconcile.Result{}, rerr
		}
		return reconcile.Result{RequeueAfter: time.Minute}, nil
	}
	// A renamed or moved gateway leaves its predecessor behind.
	if err := r.deleteGateways(ctx, g, g.Spec.Gateway.Namespace+"/"+g.Spec.Gateway.Name); err != nil {
		return reconcile.Result{}, err
	}
	msg := fmt.Sprintf("Istio Gateway %s/%s serves %d hosts", g.Spec.Gateway.Namespace, g.Spec.Gateway.Name, len(g.Spec.Gateway.Hosts))
	return reconcile.Result{RequeueAfter: r.resync}, r.report(ctx, g, gatewayv1alpha1.StateReady, gatewayv1alpha1.ReasonGatewayApplied, msg, nil)
}

// istioGateway is the default gateway an APIGateway asks for: HTTPS on 443
// with the credential Secret when there is one, HTTP on 80 (redirecting to
// HTTPS when asked).
func istioGateway(g *gatewayv1alpha1.APIGateway) *networkingv1.Gateway {
	spec := g.Spec.Gateway
	gw := &networkingv1.Gateway{ObjectMeta: metav1.ObjectMeta{
		Name: spec.Name, Namespace: spec.Namespace,
		Labels: map[string]string{LabelAPIGateway: g.Name, apirule.LabelManagedBy: "portal"},
	}}
	gw.APIVersion, gw.Kind = networkingv1.SchemeGroupVersion.String(), "Gateway"
	gw.Spec.Selector = maps.Clone(spec.Selector)
	if len(gw.Spec.Selector) == 0 {
		gw.Spec.Selector = map[string]string{"istio": "ingressgateway"}
	}
	hosts := make([]string, len(spec.Hosts))
	for i, h := range spec.Hosts {
		hosts[i] = string(h)
	}
	if spec.CredentialName != nil {
		gw.Spec.Servers = append(gw.Spec.Servers, &networkingapi.Server{
			Port:  &networkingapi.Port{Number: 443, Protocol: "HTTPS", Name: "https"},
			Hosts: slices.Clone(hosts),
			Tls:   &networkingapi.ServerTLSSettings{Mode: networkingapi.ServerTLSSettings_SIMPLE, CredentialName: *spec.CredentialName},
		})
	}
	http := &networkingapi.Server{
		Port:  &networkingapi.Port{Number: 80, Protocol: "HTTP", Name: "http"},
		Hosts: slices.Clone(hosts),
	}
	if spec.HTTPSRedirect {
		http.Tls = &networkingapi.ServerTLSSettings{HttpsRedirect: true}
	}
	gw.Spec.Servers = append(gw.Spec.Servers, http)
	return gw
}

// delete removes the gateway once nothing uses it; until then the
// APIGateway stays, in state Warning, listing what blocks it.
func (r *gatewayReconciler) delete(ctx context.Context, g *gatewayv1alpha1.APIGateway) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(g, gatewayv1alpha1.FinalizerAPIGateway) {
		return reconcile.Result{}, nil
	}
	blocking, err := r.blocking(ctx, g)
	if err != nil {
		return reconcile.Result{}, err
	}
	if len(blocking) > 0 {
		r.log.Info("APIGateway deletion blocked", "name", g.Name, "blocking", blocking)
		msg := fmt.Sprintf("deletion waits until the %d objects in status.blockingResources stop using gateway %s/%s", len(blocking), g.Spec.Gateway.Namespace, g.Spec.Gateway.Name)
		if len(blocking) > maxBlocking {
			blocking = blocking[:maxBlocking]
		}
		return reconcile.Result{RequeueAfter: blockedRetry}, r.report(ctx, g, gatewayv1alpha1.StateWarning, gatewayv1alpha1.ReasonDeletionBlocked, msg, blocking)
	}
	if err := r.deleteGateways(ctx, g, ""); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.removeFinalizer(ctx, g)
}

func (r *gatewayReconciler) removeFinalizer(ctx context.Context, g *gatewayv1alpha1.APIGateway) error {
	if !controllerutil.RemoveFinalizer(g, gatewayv1alpha1.FinalizerAPIGateway) {
		return nil
	}
	return client.IgnoreNotFound(r.client.Update(ctx, g))
}

// deleteGateways deletes g's Istio Gateways except keep (namespace/name).
func (r *gatewayReconciler) deleteGateways(ctx context.Context, g *gatewayv1alpha1.APIGateway, keep string) error {
	list := &networkingv1.GatewayList{}
	if err := r.client.List(ctx, list, client.MatchingLabels{LabelAPIGateway: g.Name}); err != nil {
		return err
	}
	for _, gw := range list.Items {
		if gw.Namespace+"/"+gw.Name == keep || !metav1.IsControlledBy(gw, g) {
			continue
		}
		if err := r.client.Delete(ctx, gw); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete Gateway %s/%s: %w", gw.Namespace, gw.Name, err)
		}
	}
	return nil
}

// blocking lists what uses g's gateway: APIRules naming it, RateLimits on
// its workload, and VirtualServices bound to it other than those generated
// for an APIRule (their APIRule is listed).
func (r *gatewayReconciler) blocking(ctx context.Context, g *gatewayv1alpha1.APIGateway) ([]gatewayv1alpha1.ObjectReference, error) {
	ref := g.Spec.Gateway.Namespace + "/" + g.Spec.Gateway.Name
	var out []gatewayv1alpha1.ObjectReference
	// Read in place from the cache, never written: tenants' objects, as
	// large as they make them, are not copied for a scan.
	rules := &gatewayv1alpha1.APIRuleList{}
	if err := r.client.List(ctx, rules, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for _, a := range rules.Items {
		if a.Spec.Gateway == ref {
			out = append(out, gatewayv1alpha1.ObjectReference{Kind: "APIRule", Namespace: a.Namespace, Name: a.Name})
		}
	}
	rls := &gatewayv1alpha1.RateLimitList{}
	if err := r.client.List(ctx, rls, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	sel := g.Spec.Gateway.Selector
	if len(sel) == 0 {
		sel = map[string]string{"istio": "ingressgateway"}
	}
	for _, rl := range rls.Items {
		if subset(rl.Spec.SelectorLabels, sel) {
			out = append(out, gatewayv1alpha1.ObjectReference{Kind: "RateLimit", Namespace: rl.Namespace, Name: rl.Name})
		}
	}
	vss := &networkingv1.VirtualServiceList{}
	if err := r.client.List(ctx, vss, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for _, vs := range vss.Items {
		if _, generated := vs.Labels[apirule.LabelAPIRule]; generated {
			continue
		}
		for _, name := range vs.Spec.Gateways {
			if name == ref || (vs.Namespace == g.Spec.Gateway.Namespace && name == g.Spec.Gateway.Name) {
				out = append(out, gatewayv1alpha1.ObjectReference{Kind: "VirtualService", Namespace: vs.Namespace, Name: vs.Name})
				break
			}
		}
	}
	return out, nil
}

// subset: every label of a is in b with the same value.
func subset(a, b map[string]string) bool {
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return len(a) > 0
}

// report writes g's status and an event when the state or reason changed.
func (r *gatewayReconciler) report(ctx context.Context, g *gatewayv1alpha1.APIGateway, state gatewayv1alpha1.State, reason, msg string, blocking []gatewayv1alpha1.ObjectReference) error {
	st := &g.Status
	if st.State == state && st.Reason == reason && st.Description == msg && slices.Equal(st.BlockingResources, blocking) &&
		meta.IsStatusConditionPresentAndEqual(st.Conditions, gatewayv1alpha1.ConditionReady, condStatus(state)) {
		return nil
	}
	notify := st.State != state || st.Reason != reason
	orig := g.DeepCopy()
	now := metav1.NewTime(time.Now())
	st.State, st.Reason, st.Description, st.BlockingResources, st.LastProcessedTime = state, reason, msg, blocking, &now
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: gatewayv1alpha1.ConditionReady, Status: condStatus(state), Reason: reason, Message: msg, ObservedGeneration: g.Generation,
	})
	if err := r.client.Status().Patch(ctx, g, client.MergeFrom(orig)); err != nil {
		return client.IgnoreNotFound(err)
	}
	if notify {
		typ := corev1.EventTypeNormal
		if state != gatewayv1alpha1.StateReady {
			typ = corev1.EventTypeWarning
		}
		r.recorder.Eventf(g, nil, typ, reason, "Reconcile", "%s", msg)
	}
	return nil
}

func condStatus(s gatewayv1alpha1.State) metav1.ConditionStatus {
	if s == gatewayv1alpha1.StateReady {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}
