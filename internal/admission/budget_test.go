package admission_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// Hostile rules: one loops over an existing array (no allocation for
// expr-lang's memory budget to see), one doubles a string to 1.5 GiB.
const (
	loopingRule = `let a = 1..1000; any(a, {any(a, {any(a, {any(a, {# < 0})})})})`
	growingRule = `reduce(1..28, #acc + #acc, "portal") == ""`
	// maxHeap is far above what the test process needs (about 100 MiB) and
	// far below what the string-growing rule builds unbounded.
	maxHeap = 768 << 20
)

// TestHostileRuleIsBoundedAndOthersUnaffected: while one namespace's looping
// and string-growing PortalRules fire on every ConfigMap written there, each
// of those writes is denied with a budget error (the rules are deny,
// onError deny), the rules' status, metric and log say so, and another
// namespace's ConfigMaps, checked by its own rule, are admitted and denied as
// usual, all with Portal's heap bounded.
func TestHostileRuleIsBoundedAndOthersUnaffected(t *testing.T) {
	cluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hostile, tenant = "budget-hostile", "budget-tenant"
	namespace(t, hostile, nil)
	namespace(t, tenant, nil)

	logs := &syncWriter{}
	budget := rule.NewBudgetStatus(env.client, nil, rule.BudgetOptions{
		Interval: 100 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	go func() { _ = budget.Start(ctx) }()
	env.engine.ReportBudget(budget)
	t.Cleanup(func() { env.engine.ReportBudget(nil) })

	rules := installBudgetRules(ctx, t, hostile, tenant)
	waitForBudgetRules(ctx, t, hostile)

	stopSampling := sampleHeapInUse()
	hostileErrs := createDuringAttack(ctx, t, hostile, tenant)
	peak := stopSampling()
	for _, err := range hostileErrs {
		if err == nil || !strings.Contains(err.Error(), "evaluation budget exceeded") {
			t.Errorf("hostile configmap: %v; want denied with a budget error", err)
		}
	}
	if peak > maxHeap {
		t.Errorf("heap in use peaked at %d MiB, want under %d MiB", peak>>20, maxHeap>>20)
	}

	for name, reasons := range map[string][]string{
		"looping": {policyv1alpha1.ReasonOperationBudget, policyv1alpha1.ReasonByteBudget},
		"growing": {policyv1alpha1.ReasonByteBudget},
	} {
		// A PortalRule's series is qualified by its namespace.
		label := hostile + "/" + rules[name].Name
		if got := testutil.ToFloat64(budget.Exceeded().WithLabelValues(label)); got < 8 {
			t.Errorf("portal_rule_budget_exceeded_total{rule=%q} = %v, want 8", label, got)
		}
		eventually(t, "the BudgetExceeded condition of "+name, func() bool {
			pr := &policyv1alpha1.PortalRule{}
			if err := env.client.Get(ctx, types.NamespacedName{Namespace: hostile, Name: name}, pr); err != nil {
				return false
			}
			c := meta.FindStatusCondition(pr.Status.Conditions, policyv1alpha1.ConditionBudgetExceeded)
			return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "evaluation budget exceeded") &&
				strings.Contains(strings.Join(reasons, ","), c.Reason)
		})
	}
	if !strings.Contains(logs.String(), `"msg":"rule evaluation stopped by its budget","rule":"budget-growing"`) {
		t.Errorf("no budget log line for budget-growing in:\n%s", logs.String())
	}
}

// installBudgetRules creates the hostile namespace's looping and growing
// rules and the tenant's ordinary rule, and returns them by PortalRule name.
func installBudgetRules(ctx context.Context, t *testing.T, hostile, tenant string) map[string]policyv1alpha1.RuleSpec {
	t.Helper()
	rules := map[string]policyv1alpha1.RuleSpec{
		"looping":     simpleRule("budget-looping", hostile, configMapGVK, loopingRule, "never", "deny"),
		"growing":     simpleRule("budget-growing", hostile, configMapGVK, growingRule, "never", "deny"),
		"tenant-rule": simpleRule("budget-tenant-rule", tenant, configMapGVK, `object.metadata.name == "forbidden"`, "that name is taken", "deny"),
	}
	for name, spec := range rules {
		ns := hostile
		if name == "tenant-rule" {
			ns = tenant
		}
		pr := &policyv1alpha1.PortalRule{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
		if err := env.client.Create(ctx, pr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.client.Delete(context.Background(), pr) })
	}
	return rules
}

// waitForBudgetRules waits until the three rules are loaded and the API
// server sends the hostile namespace's ConfigMap creates to Portal.
func waitForBudgetRules(ctx context.Context, t *testing.T, hostile string) {
	t.Helper()
	eventually(t, "the three rules loaded", func() bool {
		n := 0
		for _, r := range env.engine.Rules() {
			if strings.HasPrefix(r.Name, "budget-") {
				n++
			}
		}
		return n == 3
	})
	eventually(t, "the namespaced webhook covers configmaps", func() bool {
		wh := webhookNamed(t, admission.NamespacedWebhookName)
		return wh != nil && findRule(wh.Rules, "configmaps") != nil
	})
	// The API server picks the new webhook configuration up a moment after
	// it is written: until it calls the webhook for the hostile namespace,
	// creates there are admitted without Portal seeing them.
	eventually(t, "the API server sends the hostile namespace's creates to Portal", func() bool {
		err := env.client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: hostile}}, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "evaluation budget exceeded")
	})
}

// sampleHeapInUse samples this process's heap in use every 20ms until the
// returned function is called, which returns the peak.
func sampleHeapInUse() (stop func() uint64) {
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(stopSampling)
		<-sampled
		return peak.Load()
	}
}

// createDuringAttack dry-runs 8 ConfigMap creates in the hostile namespace
// from two goroutines while the tenant creates 20 it may and one its rule
// denies, checking the tenant's answers; it returns the hostile answers.
func createDuringAttack(ctx context.Context, t *testing.T, hostile, tenant string) []error {
	t.Helper()
	cm := func(ns, name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	}
	var wg sync.WaitGroup
	hostileErrs := make(chan error, 8)
	for i := range 2 {
		wg.Go(func() {
			for j := range 4 {
				hostileErrs <- env.client.Create(ctx, cm(hostile, fmt.Sprintf("h-%d-%d", i, j)), client.DryRunAll)
			}
		})
	}
	for i := range 20 {
		if err := env.client.Create(ctx, cm(tenant, fmt.Sprintf("t-%d", i)), client.DryRunAll); err != nil {
			t.Errorf("tenant configmap %d: %v; want admitted", i, err)
		}
	}
	if err := env.client.Create(ctx, cm(tenant, "forbidden"), client.DryRunAll); err == nil || !strings.Contains(err.Error(), "that name is taken") {
		t.Errorf("tenant configmap forbidden: %v; want denied by the tenant's rule", err)
	}
	wg.Wait()
	close(hostileErrs)
	var errs []error
	for err := range hostileErrs {
		errs = append(errs, err)
	}
	return errs
}

// TestEvaluationStopsAtTheWebhookDeadline: a rule whose budget cannot stop
// it (this Portal lifts it) is stopped by the deadline the API server sends
// with the call, early enough that Portal still answers: the request is
// denied with the deadline error instead of failing on a webhook timeout.
func TestEvaluationStopsAtTheWebhookDeadline(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns, name = "budget-deadline", "portal-budget-deadline"
	namespace(t, ns, nil)
	eng := engine.New(exprlang.New(exprlang.WithLimits(exprlang.Limits{Operations: 1 << 60, Bytes: 1 << 40})))
	r, err := eng.Compile(&core.Rule{
		Name: "endless", Enabled: true, Modes: []core.Mode{core.ModeAdmission},
		EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny,
		Match:      core.Match{GVKs: []core.GVK{{Version: "v1", Kind: "ConfigMap"}}, Namespaces: core.NamespaceMatch{Include: []string{ns}}},
		Expression: `let a = 1..1000; all(a, {all(a, {all(a, {all(a, {# > 0})})})})`,
	})
	if err != nil {
		t.Fatal(err)
	}
	eng.SetRules([]*engine.Rule{r})
	p, err := startPortal(portalOptions{name: name, logs: &syncWriter{}, evaluator: eng, rules: eng})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.stop()
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		_ = env.client.Delete(context.Background(), vwc)
	})
	waitCovered(t, name, "configmaps", true)
	// The API server calls a newly written configuration's webhook a
	// moment after it is written: until then the create is admitted.
	eventually(t, "the create denied by the deadline", func() bool {
		err = env.client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns}}, client.DryRunAll)
		return err != nil
	})
	if !strings.Contains(err.Error(), "[endless] evaluation error: evaluation budget exceeded: the request's deadline passed") {
		t.Fatalf("create: %v; want denied by the deadline", err)
	}
}
