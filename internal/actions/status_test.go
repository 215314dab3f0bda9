package actions_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// TestActionsReadyCondition: a rule whose actions cannot run says why in
// its status: the layer is off, or a type is not enabled; a rule whose
// actions all run says so too.
func TestActionsReadyCondition(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := shared.Cluster(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, policyv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cl.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var rules []*core.Rule
	for _, name := range []string{"runs", "needs-evict"} {
		cr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: policyv1alpha1.RuleSpec{
			Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "Pod"}}}, Rule: "true",
			Actions: []policyv1alpha1.Action{{Type: "label", Key: "portal.io/x", Value: "y"}}}}
		if err := c.Create(ctx, cr); err != nil {
			t.Fatal(err)
		}
		r := clusterRule(name, spec("label", "key", "portal.io/x", "value", "y"))
		if name == "needs-evict" {
			r.Actions = append(r.Actions, spec("evict"))
		}
		rules = append(rules, r)
	}
	condition := func(name string) *metav1.Condition {
		cr := &policyv1alpha1.PortalClusterRule{}
		if c.Get(ctx, client.ObjectKey{Name: name}, cr) != nil {
			return nil
		}
		return meta.FindStatusCondition(cr.Status.Conditions, policyv1alpha1.ConditionActionsReady)
	}
	run := func(o actions.StatusOptions) func() {
		o.Client, o.Rules = c, func() []*core.Rule { return rules }
		st := actions.NewStatus(o)
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = st.Start(sctx); close(done) }()
		return func() { stop(); <-done }
	}

	stop := run(actions.StatusOptions{Layer: false})
	devtest.Eventually(t, "ActionsLayerOff", func() bool {
		c := condition("runs")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == policyv1alpha1.ReasonActionsLayerOff
	})
	stop()

	stop = run(actions.StatusOptions{Layer: true, Enabled: []string{"label"}})
	defer stop()
	devtest.Eventually(t, "ActionDisabled and ActionsRunnable", func() bool {
		off, ok := condition("needs-evict"), condition("runs")
		return off != nil && off.Status == metav1.ConditionFalse && off.Reason == policyv1alpha1.ReasonActionDisabled && strings.Contains(off.Message, "evict") &&
			ok != nil && ok.Status == metav1.ConditionTrue && ok.Reason == policyv1alpha1.ReasonActionsRunnable
	})
}

// TestCRDValidatesActionParameters: the API server refuses an action field
// its type does not read, and a missing required one, with a message that
// says which.
func TestCRDValidatesActionParameters(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	scheme := runtime.NewScheme()
	if err := policyv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cl.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		action policyv1alpha1.Action
		want   string
	}{
		{policyv1alpha1.Action{Type: "evict", Key: "portal.io/x"}, "key is required for label and annotate, and only read by them"},
		{policyv1alpha1.Action{Type: "label"}, "key is required for label and annotate"},
		{policyv1alpha1.Action{Type: "alertmanager"}, "template is required for alertmanager"},
		{policyv1alpha1.Action{Type: "label", Key: "portal.io/x", MinHealthyReplicas: "2"}, "minHealthyReplicas is only read by evict"},
		{policyv1alpha1.Action{Type: "evict", Keep: true}, "keep is only read by label, annotate and patch-networkpolicy"},
		{policyv1alpha1.Action{Type: "label", Key: "portal.io/x", RecreateServiceAccount: true}, "recreateServiceAccount is only read by revoke-sa-token"},
	} {
		cr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("invalid-%d", i)}, Spec: policyv1alpha1.RuleSpec{
			Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "Pod"}}}, Rule: "true",
			Actions: []policyv1alpha1.Action{tc.action}}}
		err := c.Create(ctx, cr)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want Invalid saying %q", tc.action, err, tc.want)
		}
	}
}

// TestActionNotPermitted: Portal asks the API server (SelfSubjectAccessReview)
// whether it may make each enabled action's requests; a rule whose action
// it may not run says which permission is missing.
func TestActionNotPermitted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := shared.Cluster(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, policyv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := client.New(cl.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// A Portal that may write rule status and nothing an action needs.
	const user = "portal-without-actions"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"portal.io"}, Resources: []string{"portalclusterrules/status"}, Verbs: []string{"get", "patch"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: user}}}
	cr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: "needs-rbac"}, Spec: policyv1alpha1.RuleSpec{
		Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "Pod"}}}, Rule: "true",
		Actions: []policyv1alpha1.Action{{Type: "evict"}}}}
	for _, o := range []client.Object{role, binding, cr} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(cl.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	st := actions.NewStatus(actions.StatusOptions{Client: c, Layer: true, Enabled: []string{"evict"},
		Rules: func() []*core.Rule { return []*core.Rule{clusterRule("needs-rbac", spec("evict"))} }})
	go func() { _ = st.Start(ctx) }()
	devtest.Eventually(t, "ActionNotPermitted", func() bool {
		got := &policyv1alpha1.PortalClusterRule{}
		if admin.Get(ctx, client.ObjectKey{Name: "needs-rbac"}, got) != nil {
			return false
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, policyv1alpha1.ConditionActionsReady)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == policyv1alpha1.ReasonActionNotPermitted &&
			strings.Contains(cond.Message, "create pods/eviction")
	})
}

// TestActionsReadyAfterRecreate: a rule deleted and created again under the
// same name gets its ActionsReady condition again, though the condition is
// the same as the one the deleted rule had.
func TestActionsReadyAfterRecreate(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := shared.Cluster(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, policyv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cl.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const name = "recreated"
	newCR := func() *policyv1alpha1.PortalClusterRule {
		return &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: policyv1alpha1.RuleSpec{
			Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "Pod"}}}, Rule: "true",
			Actions: []policyv1alpha1.Action{{Type: "label", Key: "portal.io/x", Value: "y"}}}}
	}
	runnable := func() bool {
		cr := &policyv1alpha1.PortalClusterRule{}
		if c.Get(ctx, client.ObjectKey{Name: name}, cr) != nil {
			return false
		}
		cond := meta.FindStatusCondition(cr.Status.Conditions, policyv1alpha1.ConditionActionsReady)
		return cond != nil && cond.Reason == policyv1alpha1.ReasonActionsRunnable
	}
	// The rules the loader has, and how often the status writer read them.
	var mu sync.Mutex
	var loaded []*core.Rule
	reads := 0
	setLoaded := func(rs ...*core.Rule) {
		mu.Lock()
		defer mu.Unlock()
		loaded, reads = rs, 0
	}
	rule := clusterRule(name, spec("label", "key", "portal.io/x", "value", "y"))
	if err := c.Create(ctx, newCR()); err != nil {
		t.Fatal(err)
	}
	setLoaded(rule)
	st := actions.NewStatus(actions.StatusOptions{Client: c, Layer: true, Enabled: []string{"label"}, Rules: func() []*core.Rule {
		mu.Lock()
		defer mu.Unlock()
		reads++
		return loaded
	}})
	go func() { _ = st.Start(ctx) }()
	devtest.Eventually(t, "ActionsRunnable on the first rule", runnable)

	if err := c.Delete(ctx, newCR()); err != nil {
		t.Fatal(err)
	}
	setLoaded()
	st.Notify()
	devtest.Eventually(t, "the status writer sees the rule gone", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reads > 0
	})
	if err := c.Create(ctx, newCR()); err != nil {
		t.Fatal(err)
	}
	setLoaded(rule)
	st.Notify()
	devtest.Eventually(t, "ActionsRunnable on the recreated rule", runnable)
}

// TestActionsReadyWithoutAlertmanager: an alertmanager action cannot run
// while Portal has no Alertmanager to send to, and its rule says so rather
// than ActionsRunnable.
func TestActionsReadyWithoutAlertmanager(t *testing.T) {
	r := clusterRule("page", spec("alertmanager", "template", "PortalHostNetwork"))
	for _, tc := range []struct {
		sink               bool
		status, reason, in string
	}{
		{false, "False", policyv1alpha1.ReasonActionDisabled, "--alertmanager-url"},
		{true, "True", policyv1alpha1.ReasonActionsRunnable, "every action can run: alertmanager"},
	} {
		st := actions.NewStatus(actions.StatusOptions{Layer: true, Enabled: []string{"alertmanager"}, AlertSink: tc.sink})
		status, reason, msg := st.Condition(r)
		if status != tc.status || reason != tc.reason || !strings.Contains(msg, tc.in) {
			t.Errorf("with an Alertmanager %v: ActionsReady %s %s %q, want %s %s containing %q", tc.sink, status, reason, msg, tc.status, tc.reason, tc.in)
		}
	}
}
