package rule

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
)

// StatusReconciler writes what the CR loader made of each rule object to its
// status: the Ready condition, parseError, observedGeneration, lastApplied and
// activeOn. It is leader-elected: only one replica writes.
type StatusReconciler struct {
	client   client.Client
	loader   *CRLoader
	recorder events.EventRecorder

	// emitted remembers the last event per object, so a reconcile that runs
	// again on a stale cache does not repeat it.
	mu      sync.Mutex
	emitted map[string]string
}

// NewStatusReconciler returns a status writer for the loader's results.
func NewStatusReconciler(c client.Client, l *CRLoader, rec events.EventRecorder) *StatusReconciler {
	return &StatusReconciler{client: c, loader: l, recorder: rec, emitted: map[string]string{}}
}

// SetupWithManager registers one status controller per kind.
func (s *StatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	for _, kind := range []string{KindCluster, KindNamespaced} {
		err := ctrl.NewControllerManagedBy(mgr).
			Named("rule-status-"+lower(kind)).
			For(newRuleObject(kind), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			WatchesRawSource(source.Channel(s.loader.changed[kind], &handler.EnqueueRequestForObject{})).
			Complete(reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				return s.reconcile(ctx, kind, req)
			}))
		if err != nil {
			return fmt.Errorf("set up %s status: %w", kind, err)
		}
	}
	return nil
}

// notLoadedYet is how soon to look again when the loader has not caught up
// with an object's generation; the loader's notification usually comes first.
const notLoadedYet = 100 * time.Millisecond

func (s *StatusReconciler) reconcile(ctx context.Context, kind string, req ctrl.Request) (ctrl.Result, error) {
	obj := newRuleObject(kind)
	if err := s.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone: forget its last event, or a tenant creating and
			// deleting rules grows the map by one entry per name.
			s.mu.Lock()
			delete(s.emitted, crKey(kind, req.Namespace, req.Name))
			s.mu.Unlock()
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	st, ok := s.loader.State(kind, req.Namespace, req.Name)
	if !ok || st.Generation != obj.GetGeneration() {
		return ctrl.Result{RequeueAfter: notLoadedYet}, nil
	}
	before := obj.DeepCopyObject().(policyv1alpha1.RuleObject)
	status := obj.GetRuleStatus()
	cond := readyCondition(st)
	meta.SetStatusCondition(&status.Conditions, cond)
	// A budget error describes the generation that ran out; a new spec
	// starts with a clean record.
	if c := meta.FindStatusCondition(status.Conditions, policyv1alpha1.ConditionBudgetExceeded); c != nil && c.ObservedGeneration != st.ActiveGeneration {
		meta.RemoveStatusCondition(&status.Conditions, policyv1alpha1.ConditionBudgetExceeded)
	}
	status.ObservedGeneration = st.Generation
	status.ParseError = st.Error
	status.ActiveOn = nil
	for _, m := range st.ActiveOn {
		status.ActiveOn = append(status.ActiveOn, policyv1alpha1.Mode(m))
	}
	status.LastApplied = nil
	if st.ActiveGeneration > 0 {
		status.LastApplied = st.LoadedAt.DeepCopy()
	}
	if equality.Semantic.DeepEqual(before.GetRuleStatus(), status) {
		return ctrl.Result{}, nil
	}
	// A merge patch replaces the whole conditions list: with the optimistic
	// lock, a condition another writer applied meanwhile (BudgetExceeded,
	// ActionsReady) makes this patch conflict and be retried from a fresh
	// read, instead of being erased.
	if err := s.client.Status().Patch(ctx, obj, client.MergeFromWithOptions(before.(client.Object), client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: notLoadedYet}, nil
		}
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("update status of %s %s: %w", kind, req, err)
	}
	s.event(crKey(kind, req.Namespace, req.Name), obj, cond)
	return ctrl.Result{}, nil
}

// event records the load outcome of a generation once.
func (s *StatusReconciler) event(key string, obj policyv1alpha1.RuleObject, cond metav1.Condition) {
	if s.recorder == nil {
		return
	}
	id := fmt.Sprintf("%d/%s", cond.ObservedGeneration, cond.Reason)
	s.mu.Lock()
	seen := s.emitted[key] == id
	s.emitted[key] = id
	s.mu.Unlock()
	if seen {
		return
	}
	typ := corev1.EventTypeNormal
	if cond.Status != metav1.ConditionTrue {
		typ = corev1.EventTypeWarning
	}
	// The message may quote a tenant's lists (up to 32 KiB); the API server
	// rejects an Event note over 1 KiB, and the Event would be lost.
	s.recorder.Eventf(obj, nil, typ, cond.Reason, "Load", "%s", core.Truncate(cond.Message, core.MaxEventNoteBytes))
}

func readyCondition(st LoadState) metav1.Condition {
	c := metav1.Condition{Type: policyv1alpha1.ConditionReady, ObservedGeneration: st.Generation}
	invalid := cmp.Or(st.Reason, policyv1alpha1.ReasonInvalidRule)
	switch {
	case st.Error != "" && st.ActiveGeneration > 0:
		c.Status, c.Reason = metav1.ConditionFalse, invalid
		c.Message = fmt.Sprintf("generation %d not loaded: %s; generation %d stays active", st.Generation, st.Error, st.ActiveGeneration)
	case st.Error != "":
		c.Status, c.Reason = metav1.ConditionFalse, invalid
		c.Message = fmt.Sprintf("not loaded: %s", st.Error)
	case len(st.NotServed) > 0:
		// Loaded, but it never fires on that kind: not Ready, though
		// admission and audit take the kind up once it is served.
		c.Status, c.Reason = metav1.ConditionFalse, policyv1alpha1.ReasonKindNotServed
		c.Message = strings.Join(st.NotServed, "; ")
	case len(st.ActiveOn) == 0:
		c.Status, c.Reason = metav1.ConditionTrue, policyv1alpha1.ReasonDisabled
		c.Message = "rule is valid and disabled (spec.enabled: false): it is not evaluated"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, policyv1alpha1.ReasonLoaded
		c.Message = fmt.Sprintf("rule loaded, active in %v", st.ActiveOn)
	}
	c.Message = core.Truncate(c.Message, 32768)
	return c
}
