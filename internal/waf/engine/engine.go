// Package engine attaches RuleSets to Gateways: the Engine controller
// deploys a data plane that polls Portal's rule set cache (the Coraza WASM
// plugin through an Istio WasmPlugin, or `portal waf-proxy` in front of the
// Gateway's Service, which also applies the Gateway's route table), gives
// it a ServiceAccount token for the cache that reads only the Engine's own
// RuleSet (the WASM plugin) or its namespace's rule sets and Gateway tables
// (the waf-proxy), and reports what it did in the Engine's status.
//
// Each data plane is a driver (internal/waf/driver) registered from its own
// file here: istio.go and proxy.go. The controller names them only to hand
// each its image flag (driverSettings); host.go is what it lends them.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/driver"
)

// FieldOwner is the server-side apply field manager of everything the
// controller writes.
const FieldOwner = "portal"

// Finalizer holds an Engine until its data plane, some of which lives in
// Portal's namespace where owner references cannot reach, is removed.
const Finalizer = "portal.io/waf-engine"

// Field indexes of Engines.
const (
	indexRuleSet = "spec.ruleSet.name"
	indexTarget  = "spec.target.name"
)

// Defaults of Options.
const (
	DefaultTokenExpiration = time.Hour
	DefaultResyncInterval  = 10 * time.Minute
	DefaultPollInterval    = 15 * time.Second
)

// GatewayGVK is the Gateway API Gateway an Engine targets.
var GatewayGVK = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"}

// Options configure the Engine controller.
type Options struct {
	// Namespace is Portal's namespace: where the cache runs, and where the
	// NetworkPolicies letting data planes reach it go.
	Namespace string
	// CacheService and CachePort are how data planes reach the cache:
	// https://<CacheService>.<Namespace>.svc:<CachePort>.
	CacheService string
	CachePort    int32
	// CABundle returns the PEM CA the cache's certificate chains to; the
	// waf-proxy driver mounts it.
	CABundle func() []byte
	// PortalPodLabels select Portal's pods (the cache) in the
	// NetworkPolicies.
	PortalPodLabels map[string]string
	// WASMImage is the default OCI reference of the Coraza WASM plugin
	// (--waf-wasm-image).
	WASMImage string
	// ProxyImage is the default image of the waf-proxy driver
	// (--waf-proxy-image).
	ProxyImage string
	// AllowedImages are the prefixes an Engine's own spec.driver.*.image
	// must start with (--waf-engine-allowed-images); WASMImage and
	// ProxyImage are always allowed. Empty: Engines cannot choose images.
	AllowedImages []string
	// OperatorName, when set, makes the istio-wasm driver apply a
	// ServiceEntry for the cache in Namespace and, per Engine, a
	// DestinationRule and a CA Secret that let the Gateway's Envoy verify
	// the cache's TLS (--operator-name).
	OperatorName string
	// TokenExpiration is the lifetime asked of the cache tokens Portal
	// mints for WasmPlugins (at least 10 minutes, the API server's floor).
	TokenExpiration time.Duration
	// TokenRenewBefore renews a token when less than this is left of it;
	// zero: a fifth of its lifetime.
	TokenRenewBefore time.Duration
	// ResyncInterval re-applies every Engine's data plane this often, which
	// repairs objects edited or deleted behind Portal's back.
	ResyncInterval time.Duration
	// Clock decides when tokens are renewed; nil: the real one.
	Clock    clock.PassiveClock
	Logger   *slog.Logger
	Recorder events.EventRecorder
	Metrics  *Metrics
}

// Reconciler is the Engine controller.
type Reconciler struct {
	client client.Client
	// reader reads without an informer the objects Portal looks up once
	// per reconcile (Services, Deployments): caching every one of them in
	// the cluster would cost more than the reads. Services are watched as
	// metadata only, for the waf-proxy's upstream (watchGatewayServices).
	reader client.Reader
	opts   Options
	// settings are the Options the drivers read.
	settings driver.Settings
	tokens   *tokenStore
}

// New returns the controller; call SetupWithManager.
func New(mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	if opts.Namespace == "" || opts.CacheService == "" || opts.CachePort == 0 {
		return nil, errors.New("engine: Namespace, CacheService and CachePort are required")
	}
	if opts.CABundle == nil {
		return nil, errors.New("engine: CABundle is required")
	}
	if opts.TokenExpiration == 0 {
		opts.TokenExpiration = DefaultTokenExpiration
	}
	if opts.TokenExpiration < 10*time.Minute {
		return nil, fmt.Errorf("engine: token expiration (--waf-engine-token-expiration) %s is below the API server's minimum of 10m", opts.TokenExpiration)
	}
	if opts.TokenRenewBefore <= 0 || opts.TokenRenewBefore >= opts.TokenExpiration {
		opts.TokenRenewBefore = opts.TokenExpiration / 5
	}
	if opts.ResyncInterval <= 0 {
		opts.ResyncInterval = DefaultResyncInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if len(opts.PortalPodLabels) == 0 {
		opts.PortalPodLabels = map[string]string{"app.kubernetes.io/name": "portal"}
	}
	return &Reconciler{client: mgr.GetClient(), reader: mgr.GetAPIReader(), opts: opts, settings: driverSettings(opts), tokens: newTokenStore()}, nil
}

// SetupWithManager indexes Engines and registers the controller: it
// watches Engines, the RuleSets they name, the Services of Gateways
// (metadata only) and, when the Gateway API is installed, Gateways
// (metadata only).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &wafv1alpha1.Engine{}, indexRuleSet, func(o client.Object) []string {
		return []string{o.(*wafv1alpha1.Engine).Spec.RuleSet.Name}
	}); err != nil {
		return fmt.Errorf("index Engines by RuleSet: %w", err)
	}
	if err := idx.IndexField(ctx, &wafv1alpha1.Engine{}, indexTarget, func(o client.Object) []string {
		return []string{o.(*wafv1alpha1.Engine).Spec.Target.Name}
	}); err != nil {
		return fmt.Errorf("index Engines by target: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("waf-engine").
		For(&wafv1alpha1.Engine{}).
		// One Engine's arrival or departure decides who wins its target.
		Watches(&wafv1alpha1.Engine{}, handler.EnqueueRequestsFromMapFunc(r.referrers(indexTarget, func(o client.Object) string {
			return o.(*wafv1alpha1.Engine).Spec.Target.Name
		}))).
		Watches(&wafv1alpha1.RuleSet{}, handler.EnqueueRequestsFromMapFunc(r.referrers(indexRuleSet, client.Object.GetName))).
		WatchesRawSource(r.caChanges())
	b = r.watchGatewayServices(b)
	if _, err := mgr.GetRESTMapper().RESTMapping(GatewayGVK.GroupKind(), GatewayGVK.Version); err == nil {
		gw := &metav1.PartialObjectMetadata{}
		gw.SetGroupVersionKind(GatewayGVK)
		b = b.WatchesMetadata(gw, handler.EnqueueRequestsFromMapFunc(r.referrers(indexTarget, client.Object.GetName)))
	} else {
		r.opts.Logger.Warn("the Gateway API is not installed: Engines report TargetNotFound until it is and Portal restarts", "error", err)
	}
	if r.opts.OperatorName != "" {
		if err := mgr.Add(r.legacyCleanup()); err != nil {
			return fmt.Errorf("add the legacy DestinationRule cleanup: %w", err)
		}
	}
	return b.Complete(r)
}

// referrers maps an object to the Engines of its namespace whose index
// field equals key(object).
func (r *Reconciler) referrers(index string, key func(client.Object) string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list wafv1alpha1.EngineList
		if err := r.client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: key(o)}); err != nil {
			r.opts.Logger.Error("list Engines", "index", index, "error", err)
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, e := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&e)})
		}
		return reqs
	}
}

// Reconcile brings one Engine's data plane and status in line with its
// spec.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var eng wafv1alpha1.Engine
	if err := r.client.Get(ctx, req.NamespacedName, &eng); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !eng.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.finalize(ctx, &eng)
	}
	if !slices.Contains(eng.Finalizers, Finalizer) {
		if err := r.applyFinalizer(ctx, &eng, true); err != nil {
			return reconcile.Result{}, err
		}
	}
	st, requeue, err := r.reconcile(ctx, &eng)
	r.opts.Metrics.Reconciles.WithLabelValues(st.result).Inc()
	if serr := r.writeStatus(ctx, &eng, st); serr != nil {
		return reconcile.Result{}, errors.Join(err, serr)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if requeue <= 0 || requeue > r.opts.ResyncInterval {
		requeue = r.opts.ResyncInterval
	}
	// controller-runtime waits RequeueAfter in wall time while requeue was
	// measured on opts.Clock: it is only when to look again. Whether a token
	// is renewed is decided on the clock when the reconcile runs, so a
	// stepped test clock renews on the next reconcile, whatever wakes it.
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// finalize removes the data plane and then the finalizer.
func (r *Reconciler) finalize(ctx context.Context, eng *wafv1alpha1.Engine) error {
	if !slices.Contains(eng.Finalizers, Finalizer) {
		return nil
	}
	if err := r.teardown(ctx, eng, r.everything(eng)); err != nil {
		return err
	}
	r.tokens.forget(eng.UID)
	return r.applyFinalizer(ctx, eng, false)
}

// applyFinalizer adds (or, with add false, gives up) Portal's finalizer
// with a server-side apply of metadata.finalizers alone.
func (r *Reconciler) applyFinalizer(ctx context.Context, eng *wafv1alpha1.Engine, add bool) error {
	meta := map[string]any{"name": eng.Name, "namespace": eng.Namespace, "uid": string(eng.UID)}
	if add {
		meta["finalizers"] = []any{Finalizer}
	}
	u := newUnstructured(wafv1alpha1.GroupVersion.WithKind("Engine"), meta)
	if err := r.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("apply finalizer of Engine %s/%s: %w", eng.Namespace, eng.Name, err))
	}
	return nil
}
