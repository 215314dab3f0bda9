package rule_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// env is the API server and rule controllers the tests of this package share.
var env struct {
	client client.Client
	engine *engine.Engine
	budget *rule.BudgetStatus
}

var shared = devtest.Shared{Setup: startControllers}

func TestMain(m *testing.M) { shared.Main(m) }

func cluster(t *testing.T) {
	t.Helper()
	shared.Cluster(t)
}

// startControllers runs the CR loader and status reconciler against the
// shared API server.
func startControllers(cl *devcluster.Cluster) (func() error, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, policyv1alpha1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	mgr, err := devtest.NewManager(cl, scheme)
	if err != nil {
		return nil, err
	}
	eng := engine.New(exprlang.New())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	loader := rule.NewCRLoader(mgr.GetCache(), eng, rule.NewIndex(eng), log, rule.NewMetrics(nil))
	loader.AllowTenantKinds([]schema.GroupKind{allowedTenantKind})
	if err := loader.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := mgr.Add(resourcesFollower(mgr, loader)); err != nil {
		return nil, err
	}
	if err := rule.NewStatusReconciler(mgr.GetClient(), loader, mgr.GetEventRecorder("portal")).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	env.budget = rule.NewBudgetStatus(mgr.GetClient(), loader, rule.BudgetOptions{Interval: 100 * time.Millisecond, Logger: log})
	if err := mgr.Add(env.budget); err != nil {
		return nil, err
	}
	eng.ReportBudget(env.budget)
	env.engine = eng
	if env.client, err = client.New(cl.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	return devtest.Run(mgr), nil
}

// resourcesFollower tells loader of every CRD change, as the manager's
// CRD metadata watch does (internal/manager/lookup.go).
func resourcesFollower(mgr ctrlmanager.Manager, loader *rule.CRLoader) ctrlmanager.Runnable {
	return ctrlmanager.RunnableFunc(func(ctx context.Context) error {
		crds := &metav1.PartialObjectMetadata{}
		crds.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		inf, err := mgr.GetCache().GetInformer(ctx, crds)
		if err != nil {
			return err
		}
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { loader.ResourcesChanged() },
			UpdateFunc: func(any, any) { loader.ResourcesChanged() },
		})
		return err
	})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	devtest.Eventually(t, what, cond)
}

func privilegedPod(ns string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "p", "namespace": ns},
		"spec": map[string]any{"containers": []any{map[string]any{
			"name": "c", "image": "nginx:1", "securityContext": map[string]any{"privileged": true},
		}}},
	}}
}

// verdict is the outcome of the named rule on obj, or "" when it did not run.
func verdict(t *testing.T, eng *engine.Engine, obj *unstructured.Unstructured, name string) core.Outcome {
	t.Helper()
	results, err := eng.Evaluate(context.Background(), obj, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Rule.Name == name {
			return r.Outcome
		}
	}
	return ""
}

func readyOf(t *testing.T, c client.Client, obj policyv1alpha1.RuleObject) (*metav1.Condition, *policyv1alpha1.RuleStatus) {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj.(client.Object)), obj.(client.Object)); err != nil {
		t.Fatal(err)
	}
	st := obj.GetRuleStatus()
	return meta.FindStatusCondition(st.Conditions, policyv1alpha1.ConditionReady), st
}

func TestCRRuleLifecycle(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	pcr := &policyv1alpha1.PortalClusterRule{
		ObjectMeta: metav1.ObjectMeta{Name: "no-privileged"},
		Spec: policyv1alpha1.RuleSpec{
			Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "Pod"}}},
			Rule:  "container.securityContext.privileged == ",
		},
	}
	if err := env.client.Create(ctx, pcr); err != nil {
		t.Fatal(err)
	}

	// A broken expression is reported in status and not loaded.
	eventually(t, "parseError and Ready=False", func() bool {
		c, st := readyOf(t, env.client, pcr)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == policyv1alpha1.ReasonInvalidRule && st.ParseError != ""
	})
	if got := verdict(t, env.engine, privilegedPod("default"), "no-privileged"); got != "" {
		t.Fatalf("broken rule was loaded: verdict %q", got)
	}
	_, st := readyOf(t, env.client, pcr)
	t.Logf("parseError: %s", st.ParseError)

	// Fixing it clears the error and loads the rule.
	devtest.Update(t, env.client, pcr, func() { pcr.Spec.Rule = "container.securityContext.privileged == true" })
	eventually(t, "parseError cleared and Ready=True", func() bool {
		c, st := readyOf(t, env.client, pcr)
		return c != nil && c.Status == metav1.ConditionTrue && st.ParseError == "" && st.ObservedGeneration == pcr.Generation &&
			st.LastApplied != nil && len(st.ActiveOn) == 2
	})
	eventually(t, "rule enforced", func() bool {
		return verdict(t, env.engine, privilegedPod("default"), "no-privileged") == core.OutcomeFail
	})

	// Breaking it again keeps the last good generation active.
	devtest.Update(t, env.client, pcr, func() { pcr.Spec.Rule = "container.securityContext.privileged == true &&" })
	eventually(t, "Ready=False naming the active generation", func() bool {
		c, _ := readyOf(t, env.client, pcr)
		return c != nil && c.Status == metav1.ConditionFalse && c.ObservedGeneration == pcr.Generation
	})
	if got := verdict(t, env.engine, privilegedPod("default"), "no-privileged"); got != core.OutcomeFail {
		t.Fatalf("last good generation no longer enforced: verdict %q", got)
	}

	// Deleting the rule removes it without a restart.
	if err := env.client.Delete(ctx, pcr); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rule removed from the index", func() bool {
		return verdict(t, env.engine, privilegedPod("default"), "no-privileged") == ""
	})
}

func TestPortalRuleOnlyMatchesItsNamespace(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	if err := env.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}); err != nil {
		t.Fatal(err)
	}
	pr := &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Name: "team-no-privileged", Namespace: "team-a"},
		Spec: policyv1alpha1.RuleSpec{
			Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "Pod"}}},
			Rule:  "container.securityContext.privileged == true",
		},
	}
	if err := env.client.Create(ctx, pr); err != nil {
		t.Fatal(err)
	}
	eventually(t, "PortalRule enforced in its namespace", func() bool {
		return verdict(t, env.engine, privilegedPod("team-a"), "team-no-privileged") == core.OutcomeFail
	})
	if got := verdict(t, env.engine, privilegedPod("team-b"), "team-no-privileged"); got != "" {
		t.Fatalf("PortalRule of team-a evaluated a pod in team-b: %q", got)
	}
	eventually(t, "Ready=True", func() bool {
		c, _ := readyOf(t, env.client, pr)
		return c != nil && c.Status == metav1.ConditionTrue
	})
}

func TestAPIServerRejectsMalformedRule(t *testing.T) {
	cluster(t)
	bad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "portal.io/v1alpha1", "kind": "PortalClusterRule",
		"metadata": map[string]any{"name": "bad"},
		"spec": map[string]any{
			"severity": "extreme",
			"match":    map[string]any{"gvk": []any{map[string]any{"kind": "Pod"}}},
			"rule":     "true",
		},
	}}
	err := env.client.Create(context.Background(), bad)
	if err == nil {
		t.Fatal("API server accepted severity: extreme")
	}
	t.Logf("rejected as expected: %v", err)
}
