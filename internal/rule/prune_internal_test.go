package rule

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// tenantRules compiles PortalRules of namespace team-a with the given
// object names.
func tenantRules(t *testing.T, names ...string) []*engine.Rule {
	t.Helper()
	eng := engine.New(exprlang.New())
	var out []*engine.Rule
	for _, n := range names {
		r, err := eng.Compile(&core.Rule{
			Name: n, Namespace: "team-a", Enabled: true, Expression: "false",
			Severity: core.SeverityLow, Modes: []core.Mode{core.ModeAudit}, EnforcementAction: core.ActionDeny,
			Match:  core.Match{GVKs: []core.GVK{{Kind: "ConfigMap"}}},
			Source: core.Source{Kind: KindNamespaced, Namespace: "team-a", Name: n},
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// A replica that is not the leader counts every rule it evaluates; the
// counts of deleted rules go with the rule set, not with a leader's write.
func TestCountsForgetDeletedRules(t *testing.T) {
	s := NewStatusCounts(nil, CountOptions{})
	rules := tenantRules(t, "kept", "deleted")
	for _, r := range rules {
		s.Evaluated(r.Rule)
	}
	s.RulesChanged(rules[:1])
	if len(s.rules) != 1 {
		t.Fatalf("%d rules counted after one of two was deleted, want 1", len(s.rules))
	}
	if evals, _ := s.Counts(rules[0].Rule); evals != 1 {
		t.Errorf("the kept rule's count is %d, want 1", evals)
	}
}

// A rule that ran out of budget and was deleted after its condition was
// written leaves no record behind.
func TestBudgetForgetsDeletedRules(t *testing.T) {
	b := NewBudgetStatus(nil, nil, BudgetOptions{})
	rules := tenantRules(t, "hostile-1", "hostile-2")
	for _, r := range rules {
		b.BudgetExceeded(r.Rule, core.ResourceRef{Kind: "ConfigMap", Namespace: "team-a", Name: "x"}, errors.New("evaluation budget exceeded"))
	}
	b.RulesChanged(nil)
	if len(b.rules) != 0 {
		t.Fatalf("%d budget records after every rule was deleted, want 0", len(b.rules))
	}
}

// The status writer forgets the last event of a rule object once the
// object is gone.
func TestStatusForgetsEventsOfDeletedRules(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := policyv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := NewStatusReconciler(fake.NewClientBuilder().WithScheme(scheme).Build(), nil, nil)
	s.emitted[crKey(KindNamespaced, "team-a", "gone")] = "1/Loaded"
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "gone"}}
	if _, err := s.reconcile(context.Background(), KindNamespaced, req); err != nil {
		t.Fatal(err)
	}
	if len(s.emitted) != 0 {
		t.Errorf("the deleted rule's last event is still remembered: %v", s.emitted)
	}
}

// A Ready message quoting a tenant's long lists (64 namespaces, 32 kinds not
// served) still makes an Event: the note is cut to what the API server
// accepts, where it was rejected and the Event lost.
func TestLoadEventNoteFitsTheAPIServer(t *testing.T) {
	rec := events.NewFakeRecorder(1)
	s := &StatusReconciler{recorder: rec, emitted: map[string]string{}}
	obj := &policyv1alpha1.PortalRule{}
	cond := metav1.Condition{Status: metav1.ConditionFalse, Reason: policyv1alpha1.ReasonInvalidRule, ObservedGeneration: 1,
		Message: "not loaded: " + strings.Repeat("match.namespaces.include x ", 600)}
	s.event("k", obj, cond)
	note := <-rec.Events
	if len(note) > len("Warning InvalidRule ")+core.MaxEventNoteBytes {
		t.Fatalf("Event note of %d bytes: the API server refuses notes over %d", len(note), core.MaxEventNoteBytes)
	}
}
