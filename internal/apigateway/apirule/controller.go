package apirule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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

// Finalizer holds an APIRule until its generated objects are deleted (the
// garbage collector would do it through the owner references, but Portal
// does not rely on one running).
const Finalizer = "portal.io/apirule"

// DefaultResync is how often an unchanged APIRule is reconciled, as the
// anchor does: it repairs hand edits and picks up new pods.
const DefaultResync = 30 * time.Minute

// retryAfter is how soon an APIRule in state Error is looked at again,
// unless it waits for an object that a watch reports (see awaited).
const retryAfter = time.Minute

// Options configure the APIRule controller.
type Options struct {
	Logger *slog.Logger
	// IngressPrincipal is the ingress gateway's identity; see Facts.
	IngressPrincipal string
	// Resync is DefaultResync when zero.
	Resync time.Duration
	// JWKSAllow lists the internal hosts a jwksUri may name anyway; see
	// ValidateJWKS.
	JWKSAllow JWKSAllow
}

// Reconciler reconciles APIRules.
type Reconciler struct {
	client   client.Client
	scheme   *runtime.Scheme
	reporter *kube.Reporter
	opts     Options
}

// Setup adds the APIRule controller to mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.Resync == 0 {
		o.Resync = DefaultResync
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reconciler{
		client: mgr.GetClient(),
		scheme: mgr.GetScheme(),
		reporter: &kube.Reporter{
			Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(kube.FieldOwner), Action: "Apply",
		},
		opts: o,
	}
	if err := index(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("apirule").
		For(&gatewayv1alpha1.APIRule{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&networkingv1.VirtualService{}).
		Owns(&securityv1.AuthorizationPolicy{}).
		Owns(&securityv1.RequestAuthentication{}).
		// When an APIRule changes or goes, the others that claim one of
		// its hosts may win or lose it; its status writes change no claim.
		Watches(&gatewayv1alpha1.APIRule{}, handler.EnqueueRequestsFromMapFunc(r.sharingHosts),
			builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	err := r.watchAwaited(b).Complete(r)
	if err != nil {
		return fmt.Errorf("set up APIRule controller: %w", err)
	}
	return nil
}

// Reconcile brings one APIRule's Istio objects in line with it.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	api := &gatewayv1alpha1.APIRule{}
	if err := r.client.Get(ctx, req.NamespacedName, api); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !api.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.finalize(ctx, api)
	}
	if !controllerutil.ContainsFinalizer(api, Finalizer) {
		controllerutil.AddFinalizer(api, Finalizer)
		if err := r.client.Update(ctx, api); err != nil {
			return reconcile.Result{}, err
		}
	}
	res := r.apply(ctx, api)
	if err := r.reporter.Report(ctx, api, &api.Status, res); err != nil {
		return reconcile.Result{}, err
	}
	if res.State != gatewayv1alpha1.StateReady {
		r.opts.Logger.Info("APIRule not applied", "namespace", api.Namespace, "name", api.Name, "reason", res.Reason, "message", res.Message)
		if awaited(res.Reason) {
			// The watch on what it waits for brings it back; the resync
			// stays as a safety net.
			return reconcile.Result{RequeueAfter: r.opts.Resync}, nil
		}
		return reconcile.Result{RequeueAfter: retryAfter}, nil
	}
	return reconcile.Result{RequeueAfter: r.opts.Resync}, nil
}

func failed(p *Problem) kube.Result {
	return kube.Result{State: gatewayv1alpha1.StateError, Reason: p.Reason, Message: p.Message}
}

// apply validates api, writes its objects and prunes the ones it no longer
// needs. A refused APIRule loses whatever it had applied before: what is
// served must be what passes validation now.
func (r *Reconciler) apply(ctx context.Context, api *gatewayv1alpha1.APIRule) kube.Result {
	facts, p := r.facts(ctx, api)
	if p == nil {
		p = ValidateSpec(api)
	}
	if p == nil {
		p = ValidateJWKS(api, r.opts.JWKSAllow)
	}
	if p != nil {
		if err := r.prune(ctx, api, nil); err != nil {
			p.Message += "; removing its previous Istio objects failed: " + err.Error()
		}
		return failed(p)
	}
	objs, err := Generate(api, facts)
	if err != nil {
		return failed(invalid("%v", err))
	}
	keep := map[string]bool{}
	all := []client.Object{objs.VirtualService}
	for _, ap := range objs.AuthorizationPolicies {
		all = append(all, ap)
	}
	for _, ra := range objs.RequestAuthentications {
		all = append(all, ra)
	}
	for _, o := range all {
		keep[o.GetName()] = true
		if err := kube.Apply(ctx, r.client, r.scheme, api, o); err != nil {
			reason := gatewayv1alpha1.ReasonApplyFailed
			if errors.Is(err, kube.ErrNameTaken) {
				reason = gatewayv1alpha1.ReasonNameTaken
			}
			return failed(&Problem{Reason: reason, Message: err.Error()})
		}
	}
	if err := r.prune(ctx, api, keep); err != nil {
		return failed(&Problem{Reason: gatewayv1alpha1.ReasonApplyFailed, Message: "remove Istio objects no rule needs: " + err.Error()})
	}
	return kube.Result{State: gatewayv1alpha1.StateReady, Reason: gatewayv1alpha1.ReasonApplied,
		Message: fmt.Sprintf("VirtualService %s, %d AuthorizationPolicies and %d RequestAuthentications applied",
			objs.VirtualService.Name, len(objs.AuthorizationPolicies), len(objs.RequestAuthentications))}
}

// prune deletes the APIRule's generated objects not named in keep.
func (r *Reconciler) prune(ctx context.Context, api *gatewayv1alpha1.APIRule, keep map[string]bool) error {
	return kube.DeleteLabelled(ctx, r.client, api.Namespace,
		map[string]string{LabelAPIRule: api.Name, LabelManagedBy: managedBy}, keep,
		&networkingv1.VirtualServiceList{}, &securityv1.AuthorizationPolicyList{}, &securityv1.RequestAuthenticationList{})
}

func (r *Reconciler) finalize(ctx context.Context, api *gatewayv1alpha1.APIRule) error {
	if !controllerutil.ContainsFinalizer(api, Finalizer) {
		return nil
	}
	if err := r.prune(ctx, api, nil); err != nil {
		return fmt.Errorf("delete the Istio objects of APIRule %s/%s: %w", api.Namespace, api.Name, err)
	}
	controllerutil.RemoveFinalizer(api, Finalizer)
	return client.IgnoreNotFound(r.client.Update(ctx, api))
}

// facts reads what generation needs from the cluster and checks it: the
// gateway, the hosts, the Services and their pods.
func (r *Reconciler) facts(ctx context.Context, api *gatewayv1alpha1.APIRule) (Facts, *Problem) {
	f := Facts{IngressPrincipal: r.opts.IngressPrincipal, Selectors: map[string]map[string]string{}}
	if p := validateServices(api); p != nil {
		return f, p
	}
	gw, p := r.gateway(ctx, api)
	if p != nil {
		return f, p
	}
	if f.Hosts, p = resolveHosts(api, gw); p != nil {
		return f, p
	}
	if p := r.hostsFree(ctx, api, f.Hosts, gatewayDomain(gw)); p != nil {
		return f, p
	}
	for i := range api.Spec.Rules {
		svc := serviceOf(api, &api.Spec.Rules[i])
		if _, done := f.Selectors[svc.Name]; done {
			continue
		}
		sel, p := r.workload(ctx, api.Namespace, svc.Name)
		if p != nil {
			return f, p
		}
		f.Selectors[svc.Name] = sel
	}
	return f, nil
}

func (r *Reconciler) gateway(ctx context.Context, api *gatewayv1alpha1.APIRule) (*networkingv1.Gateway, *Problem) {
	ns, name, _ := strings.Cut(api.Spec.Gateway, "/")
	gw := &networkingv1.Gateway{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, gw); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &Problem{Reason: gatewayv1alpha1.ReasonGatewayNotFound, Message: fmt.Sprintf("spec.gateway: no Istio Gateway %s", api.Spec.Gateway)}
		}
		return nil, &Problem{Reason: gatewayv1alpha1.ReasonApplyFailed, Message: fmt.Sprintf("read Gateway %s: %v", api.Spec.Gateway, err)}
	}
	return gw, nil
}

// gatewayDomain is the domain a short host is completed with: that of the
// gateway's single wildcard host, "" when it has not exactly one.
func gatewayDomain(gw *networkingv1.Gateway) string {
	var host string
	for _, s := range gw.Spec.Servers {
		for _, h := range s.Hosts {
			if _, after, ok := strings.Cut(h, "/"); ok {
				h = after
			}
			if host != "" && h != host {
				return ""
			}
			host = h
		}
	}
	if !strings.HasPrefix(host, "*.") {
		return ""
	}
	return strings.TrimPrefix(host, "*.")
}

// resolveHosts completes short hosts and lower-cases all of them: DNS
// names are case-insensitive, so `Api.Example.com` is `api.example.com`
// when hosts are compared.
func resolveHosts(api *gatewayv1alpha1.APIRule, gw *networkingv1.Gateway) ([]string, *Problem) {
	var out []string
	for i, h := range api.Spec.Hosts {
		host := strings.ToLower(string(h))
		if !strings.Contains(host, ".") {
			d := gatewayDomain(gw)
			if d == "" {
				return nil, &Problem{Reason: gatewayv1alpha1.ReasonGatewayNotFound, Message: fmt.Sprintf(
					"hosts[%d] %q is a short host, which needs a gateway with exactly one host of the form *.<domain>; %s has other hosts: use a fully qualified host",
					i, h, api.Spec.Gateway)}
			}
			host += "." + d
		}
		if !slices.Contains(out, host) {
			out = append(out, host)
		}
	}
	return out, nil
}

// claimKey names an APIRule.
func claimKey(o client.Object) string { return o.GetNamespace() + "/" + o.GetName() }

// wins reports whether APIRule a keeps a host that b also claims: the
// older one, and between two created in the same second (timestamps have
// no finer grain) the one already serving it, then the lesser
// namespace/name. So racing an APIRule into the same second takes nothing
// from whoever serves the host.
func wins(a, b client.Object, serving map[string]bool) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	if sa, sb := serving[claimKey(a)], serving[claimKey(b)]; sa != sb {
		return sa
	}
	return claimKey(a) < claimKey(b)
}

// hostsFree refuses a host that overlaps (see hostsOverlap: a wildcard
// and a host it matches, or two wildcards one of which covers the other) a
// host that a VirtualService not generated for this APIRule serves, or that
// an APIRule which wins it (see wins) claims. A losing APIRule's
// VirtualService does not count: that APIRule is refused in turn and loses
// it, so the oldest claim wins whoever was reconciled first.
//
// domain completes the short hosts of APIRules on the same gateway, as
// resolveHosts completed this one's.
func (r *Reconciler) hostsFree(ctx context.Context, api *gatewayv1alpha1.APIRule, hosts []string, domain string) *Problem {
	// Every APIRule and VirtualService of the cluster, read in place from
	// the cache and never written: a deep copy of each per reconcile made
	// a tenant's large APIRules cost every reconcile their whole size.
	rules := &gatewayv1alpha1.APIRuleList{}
	if err := r.client.List(ctx, rules, client.UnsafeDisableDeepCopy); err != nil {
		return &Problem{Reason: gatewayv1alpha1.ReasonApplyFailed, Message: "list APIRules: " + err.Error()}
	}
	vss := &networkingv1.VirtualServiceList{}
	if err := r.client.List(ctx, vss, client.UnsafeDisableDeepCopy); err != nil {
		return &Problem{Reason: gatewayv1alpha1.ReasonApplyFailed, Message: "list VirtualServices: " + err.Error()}
	}
	claims := map[string]*gatewayv1alpha1.APIRule{}
	for i := range rules.Items {
		claims[claimKey(&rules.Items[i])] = &rules.Items[i]
	}
	// generatedBy is the APIRule a VirtualService was generated for and is
	// controlled by, nil for any other VirtualService.
	generatedBy := func(vs *networkingv1.VirtualService) *gatewayv1alpha1.APIRule {
		owner, ok := vs.Labels[LabelAPIRule]
		if !ok || vs.Labels[LabelManagedBy] != managedBy {
			return nil
		}
		o := claims[vs.Namespace+"/"+owner]
		if o == nil || !controlledBy(vs, o) {
			return nil
		}
		return o
	}
	// serving: the APIRules whose VirtualService serves one of hosts.
	serving := map[string]bool{}
	for _, vs := range vss.Items {
		if o := generatedBy(vs); o != nil && slices.ContainsFunc(vs.Spec.Hosts, func(h string) bool { _, ok := overlapping(hosts, h); return ok }) {
			serving[claimKey(o)] = true
		}
	}
	for _, o := range rules.Items {
		if o.UID == api.UID || !o.DeletionTimestamp.IsZero() || !wins(&o, api, serving) {
			continue
		}
		for _, h := range o.Spec.Hosts {
			host := strings.ToLower(string(h))
			if !strings.Contains(host, ".") && o.Spec.Gateway == api.Spec.Gateway && domain != "" {
				host = host + "." + domain
			}
			if mine, ok := overlapping(hosts, host); ok {
				return &Problem{Reason: gatewayv1alpha1.ReasonHostInUse, Message: fmt.Sprintf(
					"%s claimed by APIRule %s/%s, which came first: a host, and every host a wildcard matches (any number of labels deep), is served by one APIRule; choose another host",
					collision(mine, host), o.Namespace, o.Name)}
			}
		}
	}
	for _, vs := range vss.Items {
		if o := generatedBy(vs); o != nil && (o.UID == api.UID || wins(api, o, serving)) {
			continue
		}
		for _, h := range vs.Spec.Hosts {
			if mine, ok := overlapping(hosts, h); ok {
				return &Problem{Reason: gatewayv1alpha1.ReasonHostInUse, Message: fmt.Sprintf(
					"%s served by VirtualService %s/%s, which is not this APIRule's: choose another host",
					collision(mine, strings.ToLower(h)), vs.Namespace, vs.Name)}
			}
		}
	}
	return nil
}

func controlledBy(vs *networkingv1.VirtualService, owner *gatewayv1alpha1.APIRule) bool {
	for _, ref := range vs.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.UID == owner.UID {
			return true
		}
	}
	return false
}

// workload returns the pod selector of a Service in ns and checks that its
// pods run an Istio sidecar: without one, the AuthorizationPolicy and
// RequestAuthentication would not be enforced and the rule's
// authentication would silently not happen.
func (r *Reconciler) workload(ctx context.Context, ns, name string) (map[string]string, *Problem) {
	svc := &corev1.Service{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &Problem{Reason: gatewayv1alpha1.ReasonServiceNotFound, Message: fmt.Sprintf("Service %s/%s does not exist", ns, name)}
		}
		return nil, &Problem{Reason: gatewayv1alpha1.ReasonApplyFailed, Message: fmt.Sprintf("read Service %s/%s: %v", ns, name, err)}
	}
	if len(svc.Spec.Selector) == 0 {
		return nil, &Problem{Reason: gatewayv1alpha1.ReasonServiceNotFound, Message: fmt.Sprintf(
			"Service %s/%s has no selector, so no workload to apply authorization to; give it a selector", ns, name)}
	}
	pods := &corev1.PodList{}
	if err := r.client.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(svc.Spec.Selector)); err != nil {
		return nil, &Problem{Reason: gatewayv1alpha1.ReasonApplyFailed, Message: "list pods: " + err.Error()}
	}
	for i := range pods.Items {
		if !kube.HasSidecar(&pods.Items[i]) {
			return nil, &Problem{Reason: gatewayv1alpha1.ReasonNoSidecar, Message: fmt.Sprintf(
				"pod %s/%s of Service %s runs without an Istio sidecar, so authentication would not be enforced; enable injection (label the namespace istio-injection=enabled) and restart it",
				ns, pods.Items[i].Name, name)}
		}
	}
	return svc.Spec.Selector, nil
}

// sharingHosts enqueues the other APIRules that claim one of obj's hosts,
// or a host that overlaps one.
func (r *Reconciler) sharingHosts(ctx context.Context, obj client.Object) []reconcile.Request {
	api, ok := obj.(*gatewayv1alpha1.APIRule)
	if !ok {
		return nil
	}
	rules := &gatewayv1alpha1.APIRuleList{}
	if err := r.client.List(ctx, rules, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range rules.Items {
		o := &rules.Items[i]
		if o.UID == api.UID {
			continue
		}
		for _, h := range o.Spec.Hosts {
			if slices.ContainsFunc(api.Spec.Hosts, func(x gatewayv1alpha1.Host) bool {
				return hostsOverlap(strings.ToLower(string(x)), strings.ToLower(string(h)))
			}) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
				break
			}
		}
	}
	return out
}
