package manager

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// checkUnservedLookup: a rule reading a custom resource whose CRD is not
// installed (cert-manager's Certificates, in the cookbook) says so in its
// LookupsReady condition. Its reads are empty, which was once written as
// null, refused by the CRD's schema and retried forever.
func checkUnservedLookup(ctx context.Context, t *testing.T, c client.Client, reg *prometheus.Registry) {
	pcr := &policyv1alpha1.PortalClusterRule{
		ObjectMeta: metav1.ObjectMeta{Name: "reads-nothing-served"},
		Spec: policyv1alpha1.RuleSpec{
			Mode:  []policyv1alpha1.Mode{"audit"},
			Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}}},
			Rule:  `len(cluster["widgets.nowhere.example"].list(object.metadata.namespace, {})) > 0`,
		},
	}
	// A rule matching the kind itself is not Ready until it is served.
	matches := &policyv1alpha1.PortalClusterRule{
		ObjectMeta: metav1.ObjectMeta{Name: "matches-nothing-served"},
		Spec: policyv1alpha1.RuleSpec{
			Mode:  []policyv1alpha1.Mode{"audit"},
			Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Group: "nowhere.example", Kind: "Widget"}}},
			Rule:  `true`,
		},
	}
	for _, o := range []client.Object{pcr, matches} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = c.Delete(ctx, matches) }()
	ready := func(want metav1.ConditionStatus) (*metav1.Condition, error) {
		var got *metav1.Condition
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			var r policyv1alpha1.PortalClusterRule
			if err := c.Get(ctx, client.ObjectKeyFromObject(matches), &r); err != nil {
				return false, err
			}
			got = meta.FindStatusCondition(r.Status.Conditions, policyv1alpha1.ConditionReady)
			return got != nil && got.Status == want, nil
		})
		return got, err
	}
	if got, err := ready(metav1.ConditionFalse); err != nil || got.Reason != policyv1alpha1.ReasonKindNotServed {
		t.Errorf("Ready of a rule matching a kind not served: %v %v, want False %s", got, err, policyv1alpha1.ReasonKindNotServed)
	}
	var cond *metav1.Condition
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var got policyv1alpha1.PortalClusterRule
		if err := c.Get(ctx, client.ObjectKeyFromObject(pcr), &got); err != nil {
			return false, err
		}
		cond = meta.FindStatusCondition(got.Status.Conditions, policyv1alpha1.ConditionLookupsReady)
		return cond != nil, nil
	})
	if err != nil {
		t.Fatalf("no LookupsReady condition on a rule reading a resource the API server does not serve: %v", err)
	}
	if cond.Status != metav1.ConditionFalse || cond.Reason != policyv1alpha1.ReasonLookupResourceUnknown {
		t.Errorf("LookupsReady %s %s %q, want False %s", cond.Status, cond.Reason, cond.Message, policyv1alpha1.ReasonLookupResourceUnknown)
	}
	// The CRD comes after the rule: the rule starts reading it without
	// an edit.
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.nowhere.example"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "nowhere.example", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}}}},
		},
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: raw}
	u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var got policyv1alpha1.PortalClusterRule
		if err := c.Get(ctx, client.ObjectKeyFromObject(pcr), &got); err != nil {
			return false, err
		}
		cond = meta.FindStatusCondition(got.Status.Conditions, policyv1alpha1.ConditionLookupsReady)
		return cond != nil && cond.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		t.Errorf("LookupsReady %s %s %q after the CRD was installed, want True", cond.Status, cond.Reason, cond.Message)
	}
	if got, err := ready(metav1.ConditionTrue); err != nil {
		t.Errorf("Ready %v after the CRD of the kind the rule matches was installed, want True without an edit: %v", got, err)
	}
	const widgets = "widgets.nowhere.example"
	informers := func() float64 { return gauge(t, reg, "portal_audit_informers", "resource", widgets) }
	devtest.Eventually(t, "audit's informer of the Widgets", func() bool { return informers() == 1 })
	// The CRD goes again: the rule matching its kind says so, without an
	// edit (the RESTMapper had learnt the kind and never forgot it), and
	// audit stops listing a resource that is no more.
	if err := c.Delete(ctx, u); err != nil {
		t.Fatal(err)
	}
	if got, err := ready(metav1.ConditionFalse); err != nil || got.Reason != policyv1alpha1.ReasonKindNotServed {
		t.Errorf("Ready %v after the CRD of the kind the rule matches was deleted, want False %s: %v", got, policyv1alpha1.ReasonKindNotServed, err)
	}
	devtest.Eventually(t, "audit's informer of the Widgets to stop", func() bool { return informers() == 0 })
}
