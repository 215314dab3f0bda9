package admission_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/admission"
)

func TestWebhookConfiguration(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "adm-config"
	putRule(t, "adm-config-pods", simpleRule("adm-config-pods", ns, podGVK, "false", "", "deny"), "pods")

	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.client.Get(ctx, types.NamespacedName{Name: admission.ConfigName}, vwc); err != nil {
		t.Fatal(err)
	}
	if len(vwc.Webhooks) != 2 || vwc.Webhooks[1].Name != admission.NamespacedWebhookName {
		t.Fatalf("want the cluster-wide and the namespaced webhook, got %d", len(vwc.Webhooks))
	}
	if n := vwc.Webhooks[1].Rules; len(n) != 0 {
		t.Errorf("namespaced webhook intercepts %+v without any PortalRule", n)
	}
	wh := vwc.Webhooks[0]
	checks := []struct {
		what      string
		got, want any
	}{
		{"name", wh.Name, admission.WebhookName},
		{"failurePolicy", *wh.FailurePolicy, admissionregistrationv1.Fail},
		{"matchPolicy", *wh.MatchPolicy, admissionregistrationv1.Equivalent},
		{"sideEffects", *wh.SideEffects, admissionregistrationv1.SideEffectClassNone},
		{"timeoutSeconds", *wh.TimeoutSeconds, int32(5)},
		{"admissionReviewVersions", wh.AdmissionReviewVersions, []string{"v1"}},
		{"url", *wh.ClientConfig.URL, admission.LocalURL(env.portal.port)},
		{"caBundle", string(wh.ClientConfig.CABundle), string(env.cert.CABundle())},
		{"namespaceSelector", wh.NamespaceSelector.MatchExpressions, []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
			Values: []string{"kube-node-lease", "kube-public", "kube-system", portalNamespace},
		}}},
	}
	for _, c := range checks {
		if !equalJSON(c.got, c.want) {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	podRule := findRule(wh.Rules, "pods")
	if podRule == nil {
		t.Fatalf("no webhook rule for pods: %+v", wh.Rules)
	}
	if !slices.Equal(podRule.Resources, []string{"pods", "pods/ephemeralcontainers"}) ||
		!slices.Equal(podRule.APIVersions, []string{"v1"}) ||
		!slices.Equal(podRule.Operations, []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}) {
		t.Errorf("pod rule: %+v", *podRule)
	}
	// Portal started with no rule: the configuration it applied then had a
	// webhook with no rules, which the API server accepts and which
	// intercepts nothing.
	applied := env.logs.lines(`"msg":"webhook configuration applied"`, `"name":"portal"`)
	if len(applied) == 0 || !strings.Contains(applied[0], `"resources":null`) {
		t.Errorf("first apply had rules, or none happened: %q", applied)
	}
	if failed := env.logs.lines(`cannot apply the webhook configuration`); len(failed) > 0 {
		t.Errorf("applies failed: %q", failed)
	}
	var mgr string
	for _, f := range vwc.ManagedFields {
		if f.Operation == metav1.ManagedFieldsOperationApply {
			mgr = f.Manager
		}
	}
	if mgr != admission.FieldOwner {
		t.Errorf("applied by %q, want field owner %q", mgr, admission.FieldOwner)
	}

	// Rule changes move the webhook rules: a ConfigMap rule adds configmaps
	// (every version), and deleting it takes them out again.
	putRule(t, "adm-config-cm", simpleRule("adm-config-cm", ns, configMapGVK, "false", "", "deny"), "configmaps")
	if r := findRule(webhookRules(t), "configmaps"); r == nil || !slices.Equal(r.APIVersions, []string{"*"}) {
		t.Errorf("configmaps rule: %+v", r)
	}
	deleteRule(t, "adm-config-cm")
	waitCovered(t, admission.ConfigName, "configmaps", false)
}

// TestWebhookConfigurationUnknownKind: a rule for a kind the API server does
// not serve yet is left out, and added once its CRD is installed.
func TestWebhookConfigurationUnknownKind(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	gvk := policyv1alpha1.GroupVersionKind{Group: "example.portal.io", Kind: "Widget"}
	putRule(t, "adm-widgets", simpleRule("adm-widgets", "adm-widgets", gvk, "object.spec?.size > 3", "widgets are small", "deny"), "")
	eventually(t, "the unknown kind to be logged", func() bool {
		return len(env.logs.lines(`admission rule kind not served by the API server`, `example.portal.io/* Widget`)) > 0
	})
	if slices.Contains(webhookResources(t, admission.ConfigName), "widgets") {
		t.Fatal("widgets in the webhook before the CRD exists")
	}

	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.portal.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.portal.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	if err := env.client.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), crd) })
	waitCovered(t, admission.ConfigName, "widgets", true)

	// And it is enforced.
	namespace(t, "adm-widgets", nil)
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.portal.io/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "big", "namespace": "adm-widgets"},
		"spec":     map[string]any{"size": int64(5)},
	}}
	eventually(t, "a big widget to be denied", func() bool {
		err := env.client.Create(ctx, w.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "[adm-widgets] widgets are small")
	})
}

func webhookRules(t *testing.T) []admissionregistrationv1.RuleWithOperations {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.client.Get(context.Background(), types.NamespacedName{Name: admission.ConfigName}, vwc); err != nil {
		t.Fatal(err)
	}
	if len(vwc.Webhooks) == 0 {
		return nil
	}
	return vwc.Webhooks[0].Rules
}

func findRule(rules []admissionregistrationv1.RuleWithOperations, resource string) *admissionregistrationv1.RuleWithOperations {
	for i := range rules {
		if slices.Contains(rules[i].Resources, resource) {
			return &rules[i]
		}
	}
	return nil
}

// TestFailClosed stops a Portal and checks the API server then rejects
// creates in workload namespaces, while the system namespaces and Portal's
// own still accept them.
func TestFailClosed(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const (
		ns   = "adm-failclosed"
		name = "portal-failclosed"
	)
	namespace(t, ns, nil)
	putRule(t, "adm-failclosed", simpleRule("adm-failclosed", ns, podGVK, "container.securityContext.privileged == true", "no privileged containers", "deny"), "pods")
	logs := &syncWriter{}
	p, err := startPortal(portalOptions{name: name, logs: logs, evaluator: env.engine, rules: env.engine})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.stop()
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.client.Delete(context.Background(), vwc); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	})
	waitCovered(t, name, "pods", true)
	allowed := func() float64 {
		return testutil.ToFloat64(p.webhook.Metrics().Requests.WithLabelValues(admission.DecisionAllowed))
	}
	// The API server calls a newly written configuration's webhook a
	// moment after it is written, not at once.
	eventually(t, "the API server calling the second Portal", func() bool {
		_ = env.client.Create(ctx, pod(ns, "probe", false), client.DryRunAll)
		return allowed() >= 1
	})
	before := allowed()
	if err := env.client.Create(ctx, pod(ns, "while-up", false)); err != nil {
		t.Fatalf("benign pod with Portal up: %v", err)
	}
	if allowed() <= before {
		t.Fatalf("the second Portal did not answer the create")
	}

	if err := p.stop(); err != nil {
		t.Fatalf("stop Portal: %v", err)
	}
	err = env.client.Create(ctx, pod(ns, "while-down", false))
	if err == nil {
		t.Fatal("with Portal down, a pod in a workload namespace was admitted: not fail-closed")
	}
	mustContain(t, "rejection", err.Error(), `failed calling webhook "validate.portal.io"`)
	t.Logf("rejected while Portal is down: %v", err)
	for _, sys := range []string{"kube-system", portalNamespace} {
		p := pod(sys, "while-down-"+strings.ReplaceAll(sys, "-", ""), false)
		if err := env.client.Create(ctx, p); err != nil {
			t.Errorf("namespace %s with Portal down: %v", sys, err)
		}
		_ = env.client.Delete(ctx, p)
	}
}

func equalJSON(a, b any) bool {
	ja, errA := jsonString(a)
	jb, errB := jsonString(b)
	return errors.Join(errA, errB) == nil && ja == jb
}

// TestNamespacedRulesWebhook: a kind only PortalRules match is admitted only
// in those rules' namespaces, by a webhook of its own, so one team's rule
// never puts other namespaces' writes on Portal's fail-closed path.
func TestNamespacedRulesWebhook(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const team, other = "adm-team", "adm-other"
	namespace(t, team, nil)
	namespace(t, other, nil)
	pr := &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Name: "team-forbidden-cm", Namespace: team},
		Spec:       simpleRule("team-forbidden-cm", team, configMapGVK, `object.metadata.name == "forbidden"`, "that name is taken", "deny"),
	}
	pr.Spec.Match.Namespaces = nil
	if err := env.client.Create(ctx, pr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), pr) })

	var nsWebhook *admissionregistrationv1.ValidatingWebhook
	eventually(t, "the namespaced webhook", func() bool {
		nsWebhook = webhookNamed(t, admission.NamespacedWebhookName)
		return nsWebhook != nil && findRule(nsWebhook.Rules, "configmaps") != nil
	})
	if r := findRule(webhookRules(t), "configmaps"); r != nil {
		t.Errorf("the cluster-wide webhook intercepts configmaps for a PortalRule: %+v", *r)
	}
	want := []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{team}}}
	if !equalJSON(nsWebhook.NamespaceSelector.MatchExpressions, want) {
		t.Errorf("namespaceSelector: got %v, want %v", nsWebhook.NamespaceSelector.MatchExpressions, want)
	}
	if r := findRule(nsWebhook.Rules, "configmaps"); *r.Scope != admissionregistrationv1.NamespacedScope {
		t.Errorf("scope %v, want Namespaced: PortalRules never match cluster-scoped objects", *r.Scope)
	}
	if *nsWebhook.FailurePolicy != admissionregistrationv1.Fail || *nsWebhook.ClientConfig.URL != admission.LocalURL(env.portal.port) {
		t.Errorf("namespaced webhook: failurePolicy %v, url %v", *nsWebhook.FailurePolicy, *nsWebhook.ClientConfig.URL)
	}

	cm := func(ns string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forbidden", Namespace: ns}}
	}
	// The API server calls the namespaced webhook for configmaps a moment
	// after the configuration says so.
	var err error
	eventually(t, "the configmap in "+team+" denied", func() bool {
		err = env.client.Create(ctx, cm(team), client.DryRunAll)
		return err != nil
	})
	if !strings.Contains(err.Error(), "that name is taken") {
		t.Errorf("configmap in %s: got %v, want denied", team, err)
	}
	served := testutil.ToFloat64(env.portal.webhook.Metrics().Requests.WithLabelValues(admission.DecisionAllowed))
	if err := env.client.Create(ctx, cm(other), client.DryRunAll); err != nil {
		t.Errorf("configmap in %s: %v", other, err)
	}
	if got := testutil.ToFloat64(env.portal.webhook.Metrics().Requests.WithLabelValues(admission.DecisionAllowed)); got != served {
		t.Errorf("a configmap in %s reached Portal (%v allowed requests, was %v)", other, got, served)
	}

	// Without the PortalRule, the namespaced webhook intercepts nothing.
	if err := env.client.Delete(ctx, pr); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the namespaced webhook emptied", func() bool {
		wh := webhookNamed(t, admission.NamespacedWebhookName)
		return wh != nil && len(wh.Rules) == 0
	})
}

// webhookNamed returns the named webhook of Portal's configuration, or nil.
func webhookNamed(t *testing.T, name string) *admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.client.Get(context.Background(), types.NamespacedName{Name: admission.ConfigName}, vwc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // not written yet: callers poll
		}
		t.Fatal(err)
	}
	for i := range vwc.Webhooks {
		if vwc.Webhooks[i].Name == name {
			return &vwc.Webhooks[i]
		}
	}
	return nil
}
