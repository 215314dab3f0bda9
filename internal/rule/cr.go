package rule

import (
	"context"
	"errors"
	"fmt"
	"golang.org/x/time/rate"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// Kinds of rule custom resources.
const (
	KindCluster    = "PortalClusterRule"
	KindNamespaced = "PortalRule"
)

// LoadState is what the CR loader made of one rule object; the status
// reconciler writes it to the object's status.
type LoadState struct {
	// Generation is the generation the loader last processed.
	Generation int64
	// Error says why that generation was not loaded; empty when it was.
	Error string
	// Reason is the Ready condition's reason when Error is set: empty for
	// InvalidRule, or a more telling one (SecretNotAllowed).
	Reason string
	// ActiveGeneration is the generation being enforced: Generation when it
	// loaded, an earlier good one when it did not, 0 when none is.
	ActiveGeneration int64
	// LoadedAt is when ActiveGeneration was loaded.
	LoadedAt metav1.Time
	// ActiveOn lists the loops the active rule runs in (none when disabled).
	ActiveOn []core.Mode
	// NotServed says, for each match kind of the active rule the API
	// server did not serve when last asked, why ("match.gvk[0]: ..."). The
	// rule stays loaded and applies to the kind once it is served.
	NotServed []string
}

// CRLoader loads PortalClusterRules and PortalRules from the manager's cache
// into the index. It runs on every replica, leader or not, so each one
// evaluates the same rules. A generation that fails to parse or compile is
// not loaded; the last good generation of that object stays active, so a typo
// never silently switches a security rule off.
type CRLoader struct {
	client   client.Reader
	compiler Compiler
	index    *Index
	log      *slog.Logger
	metrics  *Metrics

	mu     sync.Mutex
	states map[string]LoadState
	// allowTenant lists the HighRateKinds PortalRules may match
	// (--allow-tenant-kinds).
	allowTenant []schema.GroupKind
	active      map[string][]*engine.Rule
	// changed tells the status reconciler of each kind that a state moved.
	changed map[string]chan event.GenericEvent
	// mapper tells cluster-scoped kinds from namespaced ones (set up with
	// the manager); discoveryAsks bounds how often it is asked, since a
	// kind it does not know makes it read the API server's discovery.
	mapper        meta.RESTMapper
	discoveryAsks *rate.Limiter
	// served remembers the match kinds found served, which need no more
	// asks; unserved holds the rules with a kind not served (or not asked
	// about yet), which the follower asks about again when resources
	// signals a change (served.go).
	served    map[policyv1alpha1.GroupVersionKind]bool
	unserved  map[string]*servedCheck
	resources chan struct{}
	// checked holds the last answers of every loaded rule, which are all
	// asked about again when a resource may have gone (recheckAll).
	checked    map[string]*servedCheck
	recheckAll atomic.Bool
	// servedEpoch counts the times served was forgotten (recheckAll).
	servedEpoch uint64
}

// NewCRLoader returns a loader reading through c (the manager's cache).
func NewCRLoader(c client.Reader, comp Compiler, index *Index, log *slog.Logger, m *Metrics) *CRLoader {
	return &CRLoader{
		client: c, compiler: comp, index: index, log: log, metrics: m,
		states:        map[string]LoadState{},
		discoveryAsks: rate.NewLimiter(5, 50),
		served:        map[policyv1alpha1.GroupVersionKind]bool{},
		unserved:      map[string]*servedCheck{},
		checked:       map[string]*servedCheck{},
		resources:     make(chan struct{}, 1),
		active:        map[string][]*engine.Rule{},
		changed: map[string]chan event.GenericEvent{
			KindCluster:    make(chan event.GenericEvent, 1024),
			KindNamespaced: make(chan event.GenericEvent, 1024),
		},
	}
}

func crKey(kind, namespace, name string) string {
	return fmt.Sprintf("cr:%s/%s/%s", kind, namespace, name)
}

// AllowTenantKinds lets PortalRules match these kinds of HighRateKinds
// (--allow-tenant-kinds); call it before the manager starts. Secrets are
// never allowed.
func (l *CRLoader) AllowTenantKinds(kinds []schema.GroupKind) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.allowTenant = slices.Clone(kinds)
}

func (l *CRLoader) allowedTenantKinds() []schema.GroupKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.allowTenant
}

// State returns the load state of one object.
func (l *CRLoader) State(kind, namespace, name string) (LoadState, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.states[crKey(kind, namespace, name)]
	return s, ok
}

// SetupWithManager registers one loading controller per kind. They do not
// need leader election: every replica must hold the rules.
func (l *CRLoader) SetupWithManager(mgr ctrl.Manager) error {
	l.mapper = mgr.GetRESTMapper()
	if err := mgr.Add(l); err != nil {
		return fmt.Errorf("set up the rule loader's served-kinds follower: %w", err)
	}
	for _, kind := range []string{KindCluster, KindNamespaced} {
		err := ctrl.NewControllerManagedBy(mgr).
			Named("rule-loader-"+lower(kind)).
			For(newRuleObject(kind), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
			Complete(reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				return ctrl.Result{}, l.reconcile(ctx, kind, req)
			}))
		if err != nil {
			return fmt.Errorf("set up %s loader: %w", kind, err)
		}
	}
	return nil
}

func (l *CRLoader) reconcile(ctx context.Context, kind string, req ctrl.Request) error {
	obj := newRuleObject(kind)
	key := crKey(kind, req.Namespace, req.Name)
	if err := l.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			l.forget(key)
			l.log.Info("rule removed", "kind", kind, "namespace", req.Namespace, "name", req.Name)
			return nil
		}
		return err
	}
	src := core.Source{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	compiled, err := l.compile(obj, src)
	var served *servedCheck
	if err == nil {
		served = l.servedOf(ctx, kind, obj)
	}

	l.mu.Lock()
	prev := l.states[key]
	st := LoadState{Generation: obj.GetGeneration(), ActiveGeneration: prev.ActiveGeneration, LoadedAt: prev.LoadedAt, ActiveOn: prev.ActiveOn, NotServed: prev.NotServed}
	if err != nil {
		st.Error = err.Error()
		if te, ok := errors.AsType[*TenantKindError](err); ok {
			st.Reason = te.Reason()
		}
	} else {
		st.ActiveGeneration, st.LoadedAt = obj.GetGeneration(), metav1.Now()
		st.ActiveOn = nil
		if compiled.Enabled {
			st.ActiveOn = slices.Clone(compiled.Modes)
		}
		l.active[key] = []*engine.Rule{compiled}
		l.index.Set(key, l.active[key])
	}
	l.states[key] = st
	if err == nil {
		l.setServedLocked(key, served)
	}
	l.mu.Unlock()

	if err != nil {
		l.metrics.LoadErrors.WithLabelValues("cr").Inc()
		l.log.Error("rule not loaded", "kind", kind, "namespace", req.Namespace, "name", req.Name,
			"generation", obj.GetGeneration(), "activeGeneration", st.ActiveGeneration, "error", err)
	} else {
		l.log.Info("rule loaded", "kind", kind, "namespace", req.Namespace, "name", req.Name, "generation", obj.GetGeneration())
	}
	l.updateGauge()
	l.notify(kind, obj)
	return nil
}

func (l *CRLoader) compile(obj policyv1alpha1.RuleObject, src core.Source) (*engine.Rule, error) {
	r, err := FromSpec(obj.GetRuleSpec(), obj.GetName(), src)
	if src.Kind == KindNamespaced {
		if errs := checkTenantKinds(obj.GetRuleSpec().Match, l.allowedTenantKinds(), clusterScopedIn(l.mapper, l.discoveryAsks)); len(errs) > 0 {
			err = errors.Join(append([]error{err}, errs...)...)
		}
	}
	if err != nil {
		return nil, err
	}
	r.Namespace = obj.GetNamespace()
	return l.compiler.Compile(r)
}

func (l *CRLoader) forget(key string) {
	l.mu.Lock()
	delete(l.states, key)
	delete(l.active, key)
	delete(l.unserved, key)
	delete(l.checked, key)
	l.mu.Unlock()
	l.index.Delete(key)
	l.updateGauge()
}

func (l *CRLoader) notify(kind string, obj policyv1alpha1.RuleObject) {
	// Never block loading on status: on a replica that is not the leader
	// nobody reads the channel, and the status reconciler requeues on its own
	// when it sees a generation the loader has not processed yet.
	select {
	case l.changed[kind] <- event.GenericEvent{Object: obj}:
	default:
	}
}

func (l *CRLoader) updateGauge() {
	l.mu.Lock()
	n := len(l.active)
	l.mu.Unlock()
	l.metrics.Loaded.WithLabelValues("cr").Set(float64(n))
}

func newRuleObject(kind string) policyv1alpha1.RuleObject {
	if kind == KindCluster {
		return &policyv1alpha1.PortalClusterRule{}
	}
	return &policyv1alpha1.PortalRule{}
}

func lower(kind string) string {
	if kind == KindCluster {
		return "portalclusterrule"
	}
	return "portalrule"
}

// WaitLoaded blocks until every rule object in the cache has been processed
// at its current generation, so "rules loaded" means the engine holds every
// rule, not merely that the cache has listed them.
func (l *CRLoader) WaitLoaded(ctx context.Context) error {
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var clusterRules policyv1alpha1.PortalClusterRuleList
		var rules policyv1alpha1.PortalRuleList
		if err := l.client.List(ctx, &clusterRules); err != nil {
			return false, nil
		}
		if err := l.client.List(ctx, &rules); err != nil {
			return false, nil
		}
		for i := range clusterRules.Items {
			if !l.processed(KindCluster, &clusterRules.Items[i]) {
				return false, nil
			}
		}
		for i := range rules.Items {
			if !l.processed(KindNamespaced, &rules.Items[i]) {
				return false, nil
			}
		}
		return true, nil
	})
}

func (l *CRLoader) processed(kind string, obj policyv1alpha1.RuleObject) bool {
	st, ok := l.State(kind, obj.GetNamespace(), obj.GetName())
	return ok && st.Generation >= obj.GetGeneration()
}
