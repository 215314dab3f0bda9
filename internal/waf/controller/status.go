package controller

import (
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/driver"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// StatusWriter writes what the Compiler made of each RuleSet to its status:
// conditions, observedGeneration, cachedRevision, ruleCount, error and
// unsupportedRules, and records an event for each change a user would want
// to see. It is leader-elected: one replica writes.
type StatusWriter struct {
	client   client.Client
	compiler *Compiler
	recorder events.EventRecorder

	mu      sync.Mutex
	emitted map[string]string
}

// NewStatusWriter returns a status writer for the compiler's results; rec
// may be nil (no events).
func NewStatusWriter(c client.Client, comp *Compiler, rec events.EventRecorder) *StatusWriter {
	return &StatusWriter{client: c, compiler: comp, recorder: rec, emitted: map[string]string{}}
}

// SetupWithManager registers the status writer.
func (s *StatusWriter) SetupWithManager(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("waf-ruleset-status").
		For(&wafv1alpha1.RuleSet{}, builder.WithPredicates(specOrAnnotations())).
		WatchesRawSource(source.Channel(s.compiler.changed, &handler.EnqueueRequestForObject{})).
		// Whether unsupported rules degrade a RuleSet depends on the
		// data planes of the Engines that use it (old and new on update).
		Watches(&wafv1alpha1.Engine{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			e, ok := o.(*wafv1alpha1.Engine)
			if !ok || e.Spec.RuleSet.Name == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: e.Namespace, Name: e.Spec.RuleSet.Name}}}
		})).
		Complete(s)
	if err != nil {
		return fmt.Errorf("set up RuleSet status: %w", err)
	}
	return nil
}

// notCompiledYet is how soon to look again when the compiler has not caught
// up with a RuleSet; its notification usually comes first.
const notCompiledYet = 100 * time.Millisecond

// maxMessage bounds condition messages (the API allows 32768 bytes).
const maxMessage = 4096

// Reconcile writes one RuleSet's status.
func (s *StatusWriter) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rs wafv1alpha1.RuleSet
	if err := s.client.Get(ctx, req.NamespacedName, &rs); err != nil {
		if apierrors.IsNotFound(err) {
			s.mu.Lock()
			delete(s.emitted, req.String())
			s.mu.Unlock()
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := rs.DeepCopy()
	st, ok := s.compiler.State(req.NamespacedName)
	allow := rs.Annotations[wafv1alpha1.AnnotationAllowUnsupportedRules] == "true"
	caughtUp := ok && st.Generation == rs.Generation && st.Allow == allow
	var users []string
	if caughtUp {
		var err error
		if users, err = s.limitedUsers(ctx, &rs); err != nil {
			return ctrl.Result{}, err
		}
		apply(&rs.Status, st, users)
	} else {
		meta.SetStatusCondition(&rs.Status.Conditions, metav1.Condition{
			Type: wafv1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, ObservedGeneration: rs.Generation,
			Reason: wafv1alpha1.ReasonCompiling, Message: fmt.Sprintf("compiling generation %d", rs.Generation),
		})
	}
	if !equality.Semantic.DeepEqual(before.Status, rs.Status) {
		if err := s.client.Status().Patch(ctx, &rs, client.MergeFrom(before)); err != nil {
			if apierrors.IsNotFound(err) {
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("update status of RuleSet %s: %w", req, err)
		}
	}
	if !caughtUp {
		return ctrl.Result{RequeueAfter: notCompiledYet}, nil
	}
	s.event(req.String(), &rs, st, users)
	return ctrl.Result{}, nil
}

// limitedUsers names the Engines of rs's namespace that use rs with a data
// plane that has limits (a registered driver whose Limits are not empty:
// the Istio WASM build of Coraza).
func (s *StatusWriter) limitedUsers(ctx context.Context, rs *wafv1alpha1.RuleSet) ([]string, error) {
	var engines wafv1alpha1.EngineList
	if err := s.client.List(ctx, &engines, client.InNamespace(rs.Namespace)); err != nil {
		return nil, fmt.Errorf("list the Engines using RuleSet %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	var names []string
	for _, e := range engines.Items {
		if e.Spec.RuleSet.Name != rs.Name {
			continue
		}
		if d, ok := driver.Lookup(driver.Of(&e)); ok && !d.Limits().Empty() {
			names = append(names, e.Name)
		}
	}
	return names, nil
}

// apply sets status from the compiler's state and the names of the Engines
// whose data plane has limits.
func apply(status *wafv1alpha1.RuleSetStatus, st State, limitedUsers []string) {
	ready, degraded := conditions(st, limitedUsers)
	gen := st.Generation
	for _, c := range []metav1.Condition{ready, degraded, {
		Type: wafv1alpha1.ConditionProgressing, Status: metav1.ConditionFalse,
		Reason: wafv1alpha1.ReasonReconciled, Message: fmt.Sprintf("generation %d processed", gen),
	}} {
		c.ObservedGeneration = gen
		meta.SetStatusCondition(&status.Conditions, c)
	}
	status.ObservedGeneration = gen
	status.CachedRevision = st.Revision.DeepCopy()
	status.RuleCount = int32(st.RuleCount)
	status.Error = st.Error.DeepCopy()
	if status.Error != nil {
		status.Error.Message = truncate(status.Error.Message)
	}
	status.UnsupportedRules = nil
	for i, f := range st.Findings {
		if i == 128 {
			break
		}
		status.UnsupportedRules = append(status.UnsupportedRules, wafv1alpha1.UnsupportedRule{
			Driver: string(f.Driver), RuleID: int64(f.RuleID), Operator: f.Operator, Reason: f.Reason,
		})
	}
}

// conditions computes Ready and Degraded from the compiler's state. Rules
// a data plane cannot run degrade the RuleSet only while an Engine with
// that data plane (limitedUsers) uses it: a RuleSet served to waf-proxies
// alone runs every rule.
func conditions(st State, limitedUsers []string) (ready, degraded metav1.Condition) {
	ready = metav1.Condition{Type: wafv1alpha1.ConditionReady}
	degraded = metav1.Condition{Type: wafv1alpha1.ConditionDegraded}
	if st.Reason != wafv1alpha1.ReasonRulesCached {
		served := "; nothing is served for this RuleSet"
		if st.Revision != nil {
			served = fmt.Sprintf("; revision %s of earlier inputs is still served", st.Revision.UUID)
		}
		msg := truncate(st.Message + served)
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, st.Reason, msg
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, st.Reason, msg
		return ready, degraded
	}
	ready.Status, ready.Reason = metav1.ConditionTrue, wafv1alpha1.ReasonRulesCached
	ready.Message = fmt.Sprintf("revision %s cached: %d rules, sha256 %s", st.Revision.UUID, st.RuleCount, st.Revision.SHA256)
	switch {
	case len(st.Findings) == 0:
		degraded.Status, degraded.Reason = metav1.ConditionFalse, wafv1alpha1.ReasonAsExpected
		degraded.Message = "every rule runs on every data plane"
	case len(limitedUsers) == 0:
		degraded.Status, degraded.Reason = metav1.ConditionFalse, wafv1alpha1.ReasonUnsupportedRulesUnused
		degraded.Message = truncate(fmt.Sprintf("no Engine with the data plane these rules do not run on uses this RuleSet: %s", describe(st.Findings)))
	case st.Allow:
		degraded.Status, degraded.Reason = metav1.ConditionFalse, wafv1alpha1.ReasonUnsupportedRulesAllowed
		degraded.Message = truncate(fmt.Sprintf("acknowledged by annotation %s: %s",
			wafv1alpha1.AnnotationAllowUnsupportedRules, describe(st.Findings)))
	default:
		degraded.Status, degraded.Reason = metav1.ConditionTrue, wafv1alpha1.ReasonUnsupportedRules
		degraded.Message = truncate(fmt.Sprintf("used by Engine %s; %s; set the annotation %s: \"true\" to acknowledge them",
			strings.Join(limitedUsers, ", "), describe(st.Findings), wafv1alpha1.AnnotationAllowUnsupportedRules))
	}
	return ready, degraded
}

// describe names the findings, the ids first so a truncated message still
// lists them.
func describe(fs []ruleset.Finding) string {
	var ids, ops []string
	for _, f := range fs {
		switch {
		case f.Operator != "":
			ops = append(ops, f.String())
		default:
			ids = append(ids, fmt.Sprint(f.RuleID))
		}
	}
	var parts []string
	if len(ops) > 0 {
		parts = append(parts, strings.Join(ops, "; "))
	}
	if len(ids) > 0 {
		parts = append(parts, fmt.Sprintf("%s: %d rules do not work as written (status.unsupportedRules says why): %s",
			fs[0].Driver, len(ids), strings.Join(ids, ", ")))
	}
	return strings.Join(parts, "; ")
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}

// event records a change of what is served or why it is not, once.
func (s *StatusWriter) event(key string, rs *wafv1alpha1.RuleSet, st State, limitedUsers []string) {
	if s.recorder == nil {
		return
	}
	ready, degraded := conditions(st, limitedUsers)
	rev := ""
	if st.Revision != nil {
		rev = st.Revision.UUID
	}
	id := strings.Join([]string{rev, ready.Reason, degraded.Reason, ready.Message}, "|")
	s.mu.Lock()
	seen := s.emitted[key] == id
	s.emitted[key] = id
	s.mu.Unlock()
	if seen {
		return
	}
	typ, reason, msg := corev1.EventTypeNormal, ready.Reason, ready.Message
	if degraded.Status == metav1.ConditionTrue {
		typ, reason, msg = corev1.EventTypeWarning, degraded.Reason, degraded.Message
	}
	if len(msg) > 1000 {
		msg = msg[:997] + "..."
	}
	s.recorder.Eventf(rs, nil, typ, reason, "Compile", "%s", msg)
}
