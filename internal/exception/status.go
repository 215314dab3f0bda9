package exception

import (
	"context"
	"fmt"
	"slices"
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
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
)

// maxMatchedRules bounds status.matchedRules, as the CRD does.
const maxMatchedRules = 256

// StatusReconciler writes what the loader made of each exception to its
// status: Ready, Expired, matchedRules and observedGeneration, with an
// Event on each change a user wants to see. It is leader-elected.
type StatusReconciler struct {
	client   client.Client
	loader   *Loader
	rules    func() []*core.Rule
	recorder events.EventRecorder
	// rulesChanged re-reads every exception's matched rules when the rule
	// set changes, one channel per kind.
	rulesChanged map[string]chan event.GenericEvent

	mu      sync.Mutex
	emitted map[string]string
	// counted is when each object's exemptedCount was last written.
	counted map[string]time.Time
}

// countEvery bounds how often an exception's exemptedCount is written: audit
// changes it with every object it evaluates.
const countEvery = 2 * time.Second

// NewStatusReconciler returns a status writer for the loader's results;
// rules lists the loaded rules, for matchedRules.
func NewStatusReconciler(c client.Client, l *Loader, rules func() []*core.Rule, rec events.EventRecorder) *StatusReconciler {
	return &StatusReconciler{client: c, loader: l, rules: rules, recorder: rec, emitted: map[string]string{}, counted: map[string]time.Time{},
		rulesChanged: map[string]chan event.GenericEvent{
			KindCluster:    make(chan event.GenericEvent, 1),
			KindNamespaced: make(chan event.GenericEvent, 1),
		}}
}

// RulesChanged makes every exception's matchedRules be read again. It
// never blocks.
func (s *StatusReconciler) RulesChanged() {
	for _, ch := range s.rulesChanged {
		select {
		case ch <- event.GenericEvent{Object: &policyv1alpha1.PortalClusterException{}}:
		default:
		}
	}
}

// SetupWithManager registers one status controller per kind.
func (s *StatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	for _, kind := range []string{KindCluster, KindNamespaced} {
		err := ctrl.NewControllerManagedBy(mgr).
			Named("exception-status-"+lower(kind)).
			For(newObject(kind), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			WatchesRawSource(source.Channel(s.loader.changed[kind], &handler.EnqueueRequestForObject{})).
			WatchesRawSource(source.Channel(s.rulesChanged[kind], handler.EnqueueRequestsFromMapFunc(s.everyObject(kind)))).
			Complete(reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				return s.reconcile(ctx, kind, req)
			}))
		if err != nil {
			return fmt.Errorf("set up %s status: %w", kind, err)
		}
	}
	return nil
}

// everyObject maps a rule-set change to every exception of kind.
func (s *StatusReconciler) everyObject(kind string) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		var reqs []reconcile.Request
		if kind == KindCluster {
			var list policyv1alpha1.PortalClusterExceptionList
			if s.client.List(ctx, &list) == nil {
				for i := range list.Items {
					reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				}
			}
			return reqs
		}
		var list policyv1alpha1.PortalExceptionList
		if s.client.List(ctx, &list) == nil {
			for i := range list.Items {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return reqs
	}
}

// notLoadedYet is how soon to look again when the loader has not caught up
// with an object's generation.
const notLoadedYet = 100 * time.Millisecond

func (s *StatusReconciler) reconcile(ctx context.Context, kind string, req ctrl.Request) (ctrl.Result, error) {
	obj := newObject(kind)
	if err := s.client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			s.mu.Lock()
			delete(s.emitted, key(kind, req.Namespace, req.Name))
			delete(s.counted, key(kind, req.Namespace, req.Name))
			s.mu.Unlock()
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	st, ok := s.loader.State(kind, req.Namespace, req.Name)
	if !ok || st.Generation != obj.GetGeneration() {
		return ctrl.Result{RequeueAfter: notLoadedYet}, nil
	}
	before := obj.DeepCopyObject().(policyv1alpha1.ExceptionObject)
	status := obj.GetExceptionStatus()
	ready := readyCondition(st)
	meta.SetStatusCondition(&status.Conditions, ready)
	expired := expiredCondition(st)
	if expired != nil {
		meta.SetStatusCondition(&status.Conditions, *expired)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, policyv1alpha1.ConditionExpired)
	}
	status.ObservedGeneration = st.Generation
	status.MatchedRules = matchedRules(st.Exception, s.rules())
	// A count that may not be written yet is written by the reconcile
	// this wait schedules.
	wait := s.countWait(kind, req, status)
	if equality.Semantic.DeepEqual(before.GetExceptionStatus(), status) {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if err := s.client.Status().Patch(ctx, obj, client.MergeFromWithOptions(before.(client.Object), client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: notLoadedYet}, nil
		}
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("update status of %s %s: %w", kind, req, err)
	}
	s.event(key(kind, req.Namespace, req.Name), obj, ready)
	return ctrl.Result{RequeueAfter: wait}, nil
}

// countWait sets status.exemptedCount from audit's count when it was not
// written in the last countEvery; otherwise it returns how long to wait
// before writing it (0 when it is current).
func (s *StatusReconciler) countWait(kind string, req ctrl.Request, status *policyv1alpha1.ExceptionStatus) time.Duration {
	n := int64(s.loader.Exempted(kind, req.Namespace, req.Name))
	if n == status.ExemptedCount {
		return 0
	}
	k := key(kind, req.Namespace, req.Name)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Wall time, not the loader's clock: the wait becomes a RequeueAfter,
	// which controller-runtime's queue counts in wall time. (Expiry,
	// which the loader times itself, is on its clock.)
	if wait := countEvery - time.Since(s.counted[k]); wait > 0 {
		return wait
	}
	s.counted[k] = time.Now()
	status.ExemptedCount = n
	return 0
}

// matchedRules lists the loaded rules x exempts from: "name" for cluster
// rules, "namespace/name" for PortalRules.
func matchedRules(x *core.Exception, rules []*core.Rule) []string {
	if x == nil {
		return nil
	}
	var out []string
	for _, r := range rules {
		if x.NamesRule(r) && !slices.Contains(out, r.MetricLabel()) {
			out = append(out, r.MetricLabel())
		}
	}
	slices.Sort(out)
	if len(out) > maxMatchedRules {
		out = out[:maxMatchedRules]
	}
	return out
}

// event records each Ready transition of a generation once.
func (s *StatusReconciler) event(k string, obj policyv1alpha1.ExceptionObject, cond metav1.Condition) {
	if s.recorder == nil {
		return
	}
	id := fmt.Sprintf("%d/%s", cond.ObservedGeneration, cond.Reason)
	s.mu.Lock()
	seen := s.emitted[k] == id
	s.emitted[k] = id
	s.mu.Unlock()
	if seen {
		return
	}
	typ := corev1.EventTypeNormal
	if cond.Status != metav1.ConditionTrue {
		typ = corev1.EventTypeWarning
	}
	s.recorder.Eventf(obj, nil, typ, cond.Reason, "Load", "%s", cond.Message)
}

func readyCondition(st State) metav1.Condition {
	c := metav1.Condition{Type: policyv1alpha1.ConditionReady, ObservedGeneration: st.Generation}
	switch {
	case st.Error != "":
		c.Status, c.Reason = metav1.ConditionFalse, st.Reason
		c.Message = "not applied: " + st.Error
	case st.Expired:
		c.Status, c.Reason = metav1.ConditionFalse, policyv1alpha1.ReasonExpired
		c.Message = fmt.Sprintf("expired at %s: the rules apply again", st.Expires.UTC().Format(time.RFC3339))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, policyv1alpha1.ReasonExceptionActive
		c.Message = "exception applies"
		if !st.Expires.IsZero() {
			c.Message += " until " + st.Expires.UTC().Format(time.RFC3339)
		}
	}
	if len(c.Message) > 32768 {
		c.Message = c.Message[:32768]
	}
	return c
}

// expiredCondition is nil for an exception without expires.
func expiredCondition(st State) *metav1.Condition {
	if st.Expires.IsZero() || st.Error != "" {
		return nil
	}
	c := metav1.Condition{Type: policyv1alpha1.ConditionExpired, ObservedGeneration: st.Generation,
		Status: metav1.ConditionFalse, Reason: policyv1alpha1.ReasonNotExpired,
		Message: "expires at " + st.Expires.UTC().Format(time.RFC3339)}
	if st.Expired {
		c.Status, c.Reason = metav1.ConditionTrue, policyv1alpha1.ReasonExpired
		c.Message = "expired at " + st.Expires.UTC().Format(time.RFC3339)
	}
	return &c
}
