package rule_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/rule"
)

// allowedTenantKind is what the shared loader runs with as
// --allow-tenant-kinds (startControllers).
var allowedTenantKind = schema.GroupKind{Group: "events.k8s.io", Kind: "Event"}

func tenantNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func portalRule(ns, name string, gvk ...policyv1alpha1.GroupVersionKind) *policyv1alpha1.PortalRule {
	return &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: policyv1alpha1.RuleSpec{
			Match: policyv1alpha1.Match{GVK: gvk},
			Rule:  "true",
		},
	}
}

// waitReady waits for the rule's Ready condition of the current generation
// and returns it.
func waitReady(t *testing.T, obj policyv1alpha1.RuleObject) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	eventually(t, "the Ready condition of "+obj.GetName(), func() bool {
		c, _ = readyOf(t, env.client, obj)
		return c != nil && c.ObservedGeneration == obj.GetGeneration()
	})
	return c
}

// TestAPIServerRefusesPortalRuleOnSecrets: the CRD refuses a PortalRule that
// names Secret among its kinds, and takes the same match in a
// PortalClusterRule.
func TestAPIServerRefusesPortalRuleOnSecrets(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	tenantNamespace(t, "tenant-secrets")
	pr := portalRule("tenant-secrets", "peek", policyv1alpha1.GroupVersionKind{Kind: "ConfigMap"}, policyv1alpha1.GroupVersionKind{Version: "v1", Kind: "Secret"})
	err := env.client.Create(ctx, pr, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "PortalRules cannot match Secrets; a PortalClusterRule can") {
		t.Fatalf("PortalRule on Secrets: got %v, want the CRD's refusal", err)
	}
	t.Logf("refused: %v", err)
	pcr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: "secrets-ok"}, Spec: pr.Spec}
	if err := env.client.Create(ctx, pcr, client.DryRunAll); err != nil {
		t.Fatalf("PortalClusterRule on Secrets: %v", err)
	}
}

// TestLoaderRefusesPortalRuleOnSecrets: where the CRD does not refuse it
// (Helm does not upgrade CRDs, so one from before this check may still be
// installed), the loader does, with a reason that says what to do. The test
// installs the PortalRule CRD without its CEL rule meanwhile.
func TestLoaderRefusesPortalRuleOnSecrets(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	tenantNamespace(t, "tenant-secrets-old-crd")
	dropPortalRuleValidation(t)
	pr := portalRule("tenant-secrets-old-crd", "peek", policyv1alpha1.GroupVersionKind{Kind: "Secret"})
	eventually(t, "the old CRD to take a PortalRule on Secrets", func() bool {
		return env.client.Create(ctx, pr) == nil
	})
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), pr) })
	c := waitReady(t, pr)
	if c.Status != metav1.ConditionFalse || c.Reason != policyv1alpha1.ReasonSecretNotAllowed ||
		!strings.Contains(c.Message, "match.gvk[0]: PortalRules cannot match Secrets; a PortalClusterRule can") {
		t.Fatalf("Ready: %s %s %q, want False SecretNotAllowed", c.Status, c.Reason, c.Message)
	}
	if got := verdict(t, env.engine, secretIn("tenant-secrets-old-crd"), "peek"); got != "" {
		t.Fatalf("the PortalRule on Secrets was loaded: verdict %q", got)
	}
}

// TestLoaderRefusesPortalRuleOnHighRateKinds: a PortalRule on Lease is not
// loaded, and says which flag would allow it; one on a kind the operator
// allowed loads; a PortalClusterRule on Lease loads.
func TestLoaderRefusesPortalRuleOnHighRateKinds(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "tenant-leases"
	tenantNamespace(t, ns)
	lease := portalRule(ns, "leases", policyv1alpha1.GroupVersionKind{Group: "coordination.k8s.io", Kind: "Lease"})
	allowed := portalRule(ns, "events", policyv1alpha1.GroupVersionKind{Group: allowedTenantKind.Group, Kind: allowedTenantKind.Kind})
	pcr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: "cluster-leases"}, Spec: lease.Spec}
	for _, o := range []client.Object{lease, allowed, pcr} {
		if err := env.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.client.Delete(context.Background(), o) })
	}
	c := waitReady(t, lease)
	if c.Status != metav1.ConditionFalse || c.Reason != policyv1alpha1.ReasonHighRateKindNotAllowed ||
		!strings.Contains(c.Message, "--allow-tenant-kinds=Lease.coordination.k8s.io") {
		t.Fatalf("Ready of the PortalRule on Lease: %s %s %q", c.Status, c.Reason, c.Message)
	}
	t.Logf("refused: %s", c.Message)
	for _, o := range []policyv1alpha1.RuleObject{allowed, pcr} {
		if c := waitReady(t, o); c.Status != metav1.ConditionTrue {
			t.Errorf("Ready of %s: %s %s %q, want True", o.GetName(), c.Status, c.Reason, c.Message)
		}
	}
}

func TestParseTenantKinds(t *testing.T) {
	got, err := rule.ParseTenantKinds([]string{"Lease.coordination.k8s.io", "Event", "Lease.coordination.k8s.io"})
	if err != nil || len(got) != 2 || got[0] != (schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}) || got[1] != (schema.GroupKind{Kind: "Event"}) {
		t.Fatalf("got %v %v", got, err)
	}
	for _, bad := range []string{"Secret", "Lease", "ConfigMap", "lease.coordination.k8s.io"} {
		if _, err := rule.ParseTenantKinds([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func secretIn(ns string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "namespace": ns},
		"data":     map[string]any{"k": "dg=="},
	}}
}

// dropPortalRuleValidation removes the CEL rules of the PortalRule CRD's
// spec, as a CRD from before they existed, until the test ends.
func dropPortalRuleValidation(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "portalrules.portal.io"}}
	var saved []apiextensionsv1.ValidationRule
	setValidations := func(rules []apiextensionsv1.ValidationRule) {
		devtest.Update(t, env.client, crd, func() {
			spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
			if saved == nil {
				saved = spec.XValidations
			}
			spec.XValidations = rules
			crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		})
	}
	setValidations(nil)
	t.Cleanup(func() {
		setValidations(saved)
		probe := portalRule("default", "probe", policyv1alpha1.GroupVersionKind{Kind: "Secret"})
		eventually(t, "the CRD to refuse PortalRules on Secrets again", func() bool {
			return env.client.Create(ctx, probe, client.DryRunAll) != nil
		})
	})
}
