package binding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

// FieldOwner is the server-side apply field manager of the conditions
// Portal sets on Gateways.
const FieldOwner = "portal-waf-binding"

// Options configure the controller.
type Options struct {
	// Cache is this replica's rule set cache: its revisions are what the
	// tables point at, and the tables are put there. Required.
	Cache *cache.Cache
	// Bundles resolves spec.bundle; nil: bundle storage not configured.
	Bundles BundleFetcher
	// Logger receives the controller's logs (slog.Default() when nil).
	Logger *slog.Logger
	// Metrics, when set, records reconciles and tables.
	Metrics *Metrics
}

// Controller keeps every Gateway's route table in this replica's cache
// (every replica), and, on the leader, the status of policies, overrides,
// Gateways and Routes. The two are separate controllers, so status writes
// never delay a table.
type Controller struct {
	client client.Client
	reader client.Reader
	opts   Options
	log    *slog.Logger

	// tablesDone tells the status controller that tables were served;
	// putErrs are the tables last refused.
	tablesDone chan event.GenericEvent
	// revisions recomputes the tables (cache changes, Trigger).
	revisions chan event.GenericEvent
	mu        sync.Mutex
	putErrs   map[types.NamespacedName]error
}

// New returns the controller for mgr.
func New(mgr ctrl.Manager, opts Options) (*Controller, error) {
	if opts.Cache == nil {
		return nil, errors.New("waf binding: Options.Cache is required")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Controller{client: mgr.GetClient(), reader: mgr.GetCache(), opts: opts, log: log.With("controller", "waf-binding"),
		tablesDone: make(chan event.GenericEvent, 1), revisions: make(chan event.GenericEvent, 1)}, nil
}

// everything is the one request the controllers reconcile: any change
// can move any route's effective policy, and recomputing all of it is
// cheap next to the API calls it saves.
var everything = reconcile.Request{NamespacedName: types.NamespacedName{Name: "all"}}

func all(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{everything} }

// SetupWithManager adds the table controller (every replica: it watches
// the specs the tables depend on and the cache's revisions) and the status
// controller (leader only: it also watches status, to restore conditions
// another writer dropped).
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	revisions := c.revisions
	go forward(c.opts.Cache.Watch(), revisions)
	spec := predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})
	tables := ctrl.NewControllerManagedBy(mgr).Named("waf-binding-tables").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), MaxConcurrentReconciles: 1})
	status := ctrl.NewControllerManagedBy(mgr).Named("waf-binding-status").
		WithOptions(controller.Options{MaxConcurrentReconciles: 1})
	for _, o := range []client.Object{
		&wafv1alpha1.WAFGatewayBindingPolicy{}, &wafv1alpha1.RuleSetOverride{}, &wafv1alpha1.RuleSet{},
		&gatewayv1.Gateway{}, &gatewayv1.HTTPRoute{}, &gatewayv1.GRPCRoute{}, &gatewayv1.ReferenceGrant{}, &corev1.Namespace{},
	} {
		tables = tables.Watches(o, handler.EnqueueRequestsFromMapFunc(all), builder.WithPredicates(spec))
		status = status.Watches(o, handler.EnqueueRequestsFromMapFunc(all))
	}
	err := tables.WatchesRawSource(source.Channel(revisions, handler.EnqueueRequestsFromMapFunc(all))).
		Complete(reconcile.Func(c.reconcileTables))
	if err != nil {
		return err
	}
	return status.WatchesRawSource(source.Channel(c.tablesDone, handler.EnqueueRequestsFromMapFunc(all))).
		Complete(reconcile.Func(c.reconcileStatus))
}

// forward turns cache changes into events; it ends with the process.
func forward(in <-chan struct{}, out chan<- event.GenericEvent) {
	for range in {
		select {
		case out <- event.GenericEvent{Object: &wafv1alpha1.RuleSet{}}:
		default:
		}
	}
}

// reconcileTables recomputes every table and serves them.
func (c *Controller) reconcileTables(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	start := time.Now()
	// Resolve only reads: no copy of the informers' objects is needed.
	snap, err := c.snapshot(ctx, client.UnsafeDisableDeepCopy)
	if err != nil {
		return ctrl.Result{}, err
	}
	res := Resolve(snap)
	putErrs := c.serveTables(res)
	if c.opts.Bundles != nil {
		inUse := map[types.NamespacedName]wafv1alpha1.BundleReference{}
		for _, p := range snap.Policies {
			if p.Spec.Bundle != nil {
				inUse[nn(p.Namespace, p.Name)] = *p.Spec.Bundle
			}
		}
		c.opts.Bundles.Retain(inUse)
	}
	c.mu.Lock()
	c.putErrs = putErrs
	c.mu.Unlock()
	c.opts.Metrics.reconciled(time.Since(start), res, len(putErrs))
	select {
	case c.tablesDone <- event.GenericEvent{Object: &wafv1alpha1.WAFGatewayBindingPolicy{}}:
	default:
	}
	for _, p := range snap.Policies {
		if p.Spec.Bundle != nil && c.opts.Bundles != nil {
			// Bundles are fetched in the background: come back for
			// failed fetches and storage outages.
			return ctrl.Result{RequeueAfter: bundleRecheck}, nil
		}
	}
	return ctrl.Result{}, nil
}

// bundleRecheck is how often tables are recomputed while policies use
// spec.bundle.
const bundleRecheck = 30 * time.Second

// Trigger recomputes the tables soon (a bundle fetch finished).
func (c *Controller) Trigger() {
	select {
	case c.revisions <- event.GenericEvent{Object: &wafv1alpha1.RuleSet{}}:
	default:
	}
}

// reconcileStatus writes what the tables made of every object.
func (c *Controller) reconcileStatus(ctx context.Context, _ reconcile.Request) (ctrl.Result, error) {
	snap, err := c.snapshot(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	res := Resolve(snap)
	c.mu.Lock()
	putErrs := c.putErrs
	c.mu.Unlock()
	errs := []error{
		c.writePolicies(ctx, res, putErrs),
		c.writeOverrides(ctx, res),
		c.writeGateways(ctx, snap, res),
		c.writeRoutes(ctx, snap, res),
	}
	return ctrl.Result{}, errors.Join(errs...)
}

// serveTables puts the tables in the cache and drops those of Gateways
// that are gone; it returns the tables refused.
func (c *Controller) serveTables(res *Result) map[types.NamespacedName]error {
	putErrs := map[types.NamespacedName]error{}
	for gw, t := range res.Tables {
		if _, err := c.opts.Cache.PutTable(gw.Namespace, gw.Name, t); err != nil {
			putErrs[gw] = err
			c.log.Warn("route table not served; the previous one stays", "gateway", gw.String(), "error", err)
		}
	}
	for _, k := range c.opts.Cache.TableKeys() {
		ns, name, _ := strings.Cut(k, "/")
		if _, ok := res.Tables[nn(ns, name)]; !ok {
			c.opts.Cache.DeleteTable(ns, name)
		}
	}
	return putErrs
}

// snapshot lists every object Resolve reads from the informers.
func (c *Controller) snapshot(ctx context.Context, opts ...client.ListOption) (*Snapshot, error) {
	s := &Snapshot{Bundles: c.opts.Bundles, NamespaceLabels: map[string]map[string]string{}}
	s.Revision = func(key string) (string, bool) {
		e, ok := c.opts.Cache.Get(key)
		return e.UUID, ok
	}
	var (
		gws  gatewayv1.GatewayList
		hrs  gatewayv1.HTTPRouteList
		grs  gatewayv1.GRPCRouteList
		pols wafv1alpha1.WAFGatewayBindingPolicyList
		ovs  wafv1alpha1.RuleSetOverrideList
		rgs  gatewayv1.ReferenceGrantList
		rss  wafv1alpha1.RuleSetList
		nss  corev1.NamespaceList
	)
	for _, l := range []client.ObjectList{&gws, &hrs, &grs, &pols, &ovs, &rgs, &rss, &nss} {
		if err := c.reader.List(ctx, l, opts...); err != nil {
			return nil, fmt.Errorf("waf binding: list %T: %w", l, err)
		}
	}
	for i := range gws.Items {
		s.Gateways = append(s.Gateways, &gws.Items[i])
	}
	for i := range hrs.Items {
		s.HTTPRoutes = append(s.HTTPRoutes, &hrs.Items[i])
	}
	for i := range grs.Items {
		s.GRPCRoutes = append(s.GRPCRoutes, &grs.Items[i])
	}
	for i := range pols.Items {
		s.Policies = append(s.Policies, &pols.Items[i])
	}
	for i := range ovs.Items {
		s.Overrides = append(s.Overrides, &ovs.Items[i])
	}
	for i := range rgs.Items {
		s.Grants = append(s.Grants, &rgs.Items[i])
	}
	for i := range rss.Items {
		s.RuleSets = append(s.RuleSets, &rss.Items[i])
	}
	for _, n := range nss.Items {
		s.NamespaceLabels[n.Name] = n.Labels
	}
	return s, nil
}
