package rule_test

import (
	"context"
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/rule"
)

// TestAPIServerRefusesPortalRuleOnClusterScopedKinds: a PortalRule only
// matches objects in its own namespace, so one on Namespace would load
// Ready and never fire; the CRD refuses it, and takes the same match in a
// PortalClusterRule.
func TestAPIServerRefusesPortalRuleOnClusterScopedKinds(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	tenantNamespace(t, "tenant-scope")
	pr := portalRule("tenant-scope", "owners", policyv1alpha1.GroupVersionKind{Version: "v1", Kind: "Namespace"})
	err := env.client.Create(ctx, pr, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "this kind is cluster-scoped, so the rule would never apply; use a PortalClusterRule") {
		t.Fatalf("PortalRule on Namespace: got %v, want the CRD's refusal", err)
	}
	pcr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: "namespace-owners"}, Spec: pr.Spec}
	if err := env.client.Create(ctx, pcr, client.DryRunAll); err != nil {
		t.Fatalf("PortalClusterRule on Namespace: %v", err)
	}
}

// TestLoaderRefusesPortalRuleOnClusterScopedCRD: a cluster-scoped kind the
// CRD's list cannot know (a custom resource) is found through discovery,
// and the rule says so in its Ready condition instead of saying True.
func TestLoaderRefusesPortalRuleOnClusterScopedCRD(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.scope.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "scope.example.com", Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}}}},
		},
	}
	if err := env.client.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), crd) })
	eventually(t, "the Widget CRD to be served", func() bool {
		_, err := env.client.RESTMapper().RESTMapping(schema.GroupKind{Group: "scope.example.com", Kind: "Widget"})
		return err == nil
	})
	const ns = "tenant-widgets"
	tenantNamespace(t, ns)
	widgets := portalRule(ns, "widgets", policyv1alpha1.GroupVersionKind{Group: "scope.example.com", Kind: "Widget"})
	configMaps := portalRule(ns, "config-maps", policyv1alpha1.GroupVersionKind{Kind: "ConfigMap"})
	for _, o := range []client.Object{widgets, configMaps} {
		if err := env.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.client.Delete(context.Background(), o) })
	}
	c := waitReady(t, widgets)
	if c.Status != metav1.ConditionFalse || c.Reason != policyv1alpha1.ReasonClusterScopedKind ||
		!strings.Contains(c.Message, "match.gvk[0]: Widget.scope.example.com is cluster-scoped, and a PortalRule only matches objects in its own namespace") {
		t.Fatalf("Ready of the PortalRule on Widget: %s %s %q, want False ClusterScopedKind", c.Status, c.Reason, c.Message)
	}
	if c := waitReady(t, configMaps); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready of the PortalRule on ConfigMap: %s %s %q, want True", c.Status, c.Reason, c.Message)
	}
}

// TestClusterScopedKindsAreTheCRDsList: the loader's list and the CRD's CEL
// rule name the same kinds, and every one the API server serves is indeed
// cluster-scoped.
func TestClusterScopedKindsAreTheCRDsList(t *testing.T) {
	cluster(t)
	crd, err := os.ReadFile("../../deploy/crds/portal.io_portalrules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var def apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(crd, &def); err != nil {
		t.Fatal(err)
	}
	var cel string
	for _, v := range def.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].XValidations {
		if strings.Contains(v.Message, "this kind is cluster-scoped") {
			cel = v.Rule
		}
	}
	if n := strings.Count(cel, "/"); n != len(rule.ClusterScopedKinds)+1 {
		t.Errorf("the CRD's CEL rule lists %d kinds, rule.ClusterScopedKinds %d: %s", n-1, len(rule.ClusterScopedKinds), cel)
	}
	for _, gk := range rule.ClusterScopedKinds {
		if !strings.Contains(cel, "'"+gk.Group+"/"+gk.Kind+"'") {
			t.Errorf("%s/%s is not in the CRD's CEL rule", gk.Group, gk.Kind)
		}
		m, err := env.client.RESTMapper().RESTMapping(gk)
		if err == nil && m.Scope.Name() != meta.RESTScopeNameRoot {
			t.Errorf("%s is namespaced, not cluster-scoped", gk)
		}
	}
}
