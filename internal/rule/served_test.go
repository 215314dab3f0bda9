package rule_test

import (
	"context"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// TestRuleOnKindNotServedIsNotReady: {group: app, kind: Deployment} (a typo
// for apps) loads but never fires, so Ready says so, naming the group that
// serves Deployment, for PortalClusterRules and PortalRules alike; the rule
// stays loaded, and a rule on served kinds is Ready as before.
func TestRuleOnKindNotServedIsNotReady(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "tenant-served"
	tenantNamespace(t, ns)
	typo := policyv1alpha1.GroupVersionKind{Group: "app", Kind: "Deployment"}
	pcr := &policyv1alpha1.PortalClusterRule{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments-typo"},
		Spec:       portalRule("", "", policyv1alpha1.GroupVersionKind{Kind: "ConfigMap"}, typo).Spec,
	}
	pr := portalRule(ns, "deployments-typo", typo)
	served := portalRule(ns, "served-kinds", policyv1alpha1.GroupVersionKind{Kind: "ConfigMap"},
		policyv1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	for _, o := range []client.Object{pcr, pr, served} {
		if err := env.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.client.Delete(context.Background(), o) })
	}
	for field, obj := range map[string]policyv1alpha1.RuleObject{"match.gvk[1]": pcr, "match.gvk[0]": pr} {
		want := field + ": Deployment.app is not served by the API server (Deployment is served in group apps); the rule applies once it is"
		var c *metav1.Condition
		var st *policyv1alpha1.RuleStatus
		eventually(t, "Ready=False KindNotServed naming "+field, func() bool {
			c, st = readyOf(t, env.client, obj)
			return c != nil && c.Reason == policyv1alpha1.ReasonKindNotServed
		})
		if c.Status != metav1.ConditionFalse || c.Message != want {
			t.Errorf("Ready of %T: %s %s %q, want False with %q", obj, c.Status, c.Reason, c.Message, want)
		}
		if len(st.ActiveOn) == 0 || st.ParseError != "" {
			t.Errorf("%T on a kind not served was not kept loaded: activeOn %v, parseError %q", obj, st.ActiveOn, st.ParseError)
		}
	}
	if c := waitReady(t, served); c.Status != metav1.ConditionTrue || c.Reason != policyv1alpha1.ReasonLoaded {
		t.Errorf("Ready of the rule on served kinds: %s %s %q, want True Loaded", c.Status, c.Reason, c.Message)
	}
}

// TestRuleTurnsReadyWhenItsCRDIsInstalled: a rule on a custom kind whose
// CRD comes later says KindNotServed, then turns Ready once the CRD is
// established, without an edit.
func TestRuleTurnsReadyWhenItsCRDIsInstalled(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	pcr := &policyv1alpha1.PortalClusterRule{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets"},
		Spec:       portalRule("", "", policyv1alpha1.GroupVersionKind{Group: "late.example.com", Kind: "Gadget"}).Spec,
	}
	if err := env.client.Create(ctx, pcr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), pcr) })
	c := waitReady(t, pcr)
	if c.Status != metav1.ConditionFalse || c.Reason != policyv1alpha1.ReasonKindNotServed ||
		c.Message != "match.gvk[0]: Gadget.late.example.com is not served by the API server; the rule applies once it is" {
		t.Fatalf("Ready before the CRD: %s %s %q, want False KindNotServed", c.Status, c.Reason, c.Message)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets.late.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "late.example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}}}},
		},
	}
	if err := env.client.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), crd) })
	gen := pcr.Generation
	eventually(t, "Ready=True once the Gadget CRD is served", func() bool {
		c, _ = readyOf(t, env.client, pcr)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if c.Reason != policyv1alpha1.ReasonLoaded || pcr.Generation != gen || !strings.Contains(c.Message, "active in") {
		t.Errorf("Ready after the CRD: %s %q at generation %d (was %d), want Loaded without an edit", c.Reason, c.Message, pcr.Generation, gen)
	}
}
