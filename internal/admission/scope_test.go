package admission_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	arv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/certs"
)

var serviceGVK = policyv1alpha1.GroupVersionKind{Kind: "Service"}

// tenantRule creates a PortalRule in ns on gvk, denying objects named
// "forbidden", until the test ends.
func tenantRule(t *testing.T, ns, name string, gvk policyv1alpha1.GroupVersionKind) *policyv1alpha1.PortalRule {
	t.Helper()
	pr := &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       simpleRule(name, ns, gvk, `object.metadata.name == "forbidden"`, "that name is taken", "deny"),
	}
	pr.Spec.Match.Namespaces = nil
	if err := env.client.Create(context.Background(), pr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), pr) })
	return pr
}

// webhooksFor returns the webhooks of the named configuration whose
// namespaceSelector admits namespace ns by name.
func webhooksFor(t *testing.T, config, ns string) []admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.client.Get(context.Background(), types.NamespacedName{Name: config}, vwc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // not applied yet
		}
		t.Fatal(err)
	}
	var out []admissionregistrationv1.ValidatingWebhook
	for _, w := range vwc.Webhooks {
		for _, e := range w.NamespaceSelector.MatchExpressions {
			in := slices.Contains(e.Values, ns)
			if (e.Operator == metav1.LabelSelectorOpIn && in) || (e.Operator == metav1.LabelSelectorOpNotIn && !in) {
				out = append(out, w)
			}
		}
	}
	return out
}

// names lists the webhooks' names, for errors.
func names(ws []admissionregistrationv1.ValidatingWebhook) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Name)
	}
	return out
}

// intercepts reports whether any of the webhooks has a rule for resource.
func intercepts(ws []admissionregistrationv1.ValidatingWebhook, resource string) bool {
	return slices.ContainsFunc(ws, func(w admissionregistrationv1.ValidatingWebhook) bool { return findRule(w.Rules, resource) != nil })
}

// TestTenantKindsStayInTheirNamespace: tenant B's PortalRule on ConfigMaps
// puts only B's ConfigMap writes behind the webhook, even when tenant A has
// PortalRules of its own (on Services): with one namespaced webhook for
// all, A's ConfigMap writes would fail while Portal is unreachable.
func TestTenantKindsStayInTheirNamespace(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const a, b, config = "adm-scope-a", "adm-scope-b", "portal-scope"
	namespace(t, a, nil)
	namespace(t, b, nil)
	tenantRule(t, a, "a-services", serviceGVK)
	tenantRule(t, b, "b-configmaps", configMapGVK)
	// This Portal's configuration manager hears of no later rule change:
	// start it once both rules are loaded.
	eventually(t, "both tenants' rules loaded", func() bool {
		n := 0
		for _, r := range env.engine.Rules() {
			if r.Name == "a-services" || r.Name == "b-configmaps" {
				n++
			}
		}
		return n == 2
	})

	// A Portal of its own, to stop while its configuration stays.
	p, err := startPortal(portalOptions{name: config, logs: &syncWriter{}, evaluator: env.engine, rules: env.engine})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.stop()
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: config}}
		if err := env.client.Delete(context.Background(), vwc); client.IgnoreNotFound(err) != nil {
			t.Errorf("delete %s: %v", config, err)
		}
	})
	// The configuration manager applies with backoff; on a busy CI machine
	// its first applies can take longer than eventually's 20 s.
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return intercepts(webhooksFor(t, config, a), "services") && intercepts(webhooksFor(t, config, b), "configmaps"), nil
	}); err != nil {
		t.Fatalf("waiting for each tenant's kind in its namespace's webhook: %v (webhooks of %s: %v)", err, a, names(webhooksFor(t, config, a)))
	}
	if ws := webhooksFor(t, config, a); intercepts(ws, "configmaps") {
		t.Errorf("tenant B's ConfigMap rule puts namespace %s's ConfigMaps behind the webhook (webhooks %v)", a, names(ws))
	}
	if ws := webhooksFor(t, config, b); intercepts(ws, "services") {
		t.Errorf("tenant A's Service rule puts namespace %s's Services behind the webhook (webhooks %v)", b, names(ws))
	}

	// The API server calls a newly written configuration's webhook a
	// moment after it is written: until it calls this Portal, the create
	// below would be admitted because the configuration is not in force.
	eventually(t, "the API server calling this Portal for "+b+"'s ConfigMaps", func() bool {
		_ = env.client.Create(ctx, configMap(b, "probe", nil), client.DryRunAll)
		return testutil.ToFloat64(p.webhook.Metrics().Requests.WithLabelValues(admission.DecisionAllowed)) >= 1
	})
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	// Fail closed where a tenant's own rule applies...
	err = env.client.Create(ctx, configMap(b, "while-down", nil), client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("ConfigMap in %s with Portal down: got %v, want fail-closed", b, err)
	}
	// ...and untouched where none does.
	if err := env.client.Create(ctx, configMap(a, "while-down", nil), client.DryRunAll); err != nil {
		t.Errorf("ConfigMap in %s with Portal down: %v: tenant B's rule blocks tenant A's writes", a, err)
	}
}

// TestNamespacedWebhooksShrink: a namespaced webhook no longer needed is
// removed, even though the caBundle injector co-owns its caBundle (leaving
// it out of the apply would leave a stub the API server rejects).
func TestNamespacedWebhooksShrink(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const a, b = "adm-shrink-a", "adm-shrink-b"
	namespace(t, a, nil)
	namespace(t, b, nil)
	tenantRule(t, a, "shrink-services", serviceGVK)
	prB := tenantRule(t, b, "shrink-configmaps", configMapGVK)
	eventually(t, "a namespaced webhook for each tenant", func() bool {
		return intercepts(webhooksFor(t, admission.ConfigName, a), "services") && intercepts(webhooksFor(t, admission.ConfigName, b), "configmaps")
	})
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.client.Get(ctx, types.NamespacedName{Name: admission.ConfigName}, vwc); err != nil {
		t.Fatal(err)
	}
	// As the certificate controller's injector does.
	ac := arv1ac.ValidatingWebhookConfiguration(admission.ConfigName)
	for _, w := range vwc.Webhooks {
		ac.WithWebhooks(arv1ac.ValidatingWebhook().WithName(w.Name).WithClientConfig(arv1ac.WebhookClientConfig().WithCABundle(env.cert.CABundle()...)))
	}
	if err := env.client.Apply(ctx, ac, client.FieldOwner(certs.InjectorFieldOwner), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	before := len(vwc.Webhooks)

	if err := env.client.Delete(ctx, prB); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the webhook of "+b+" removed", func() bool {
		live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := env.client.Get(ctx, types.NamespacedName{Name: admission.ConfigName}, live); err != nil {
			t.Fatal(err)
		}
		return len(live.Webhooks) < before && !intercepts(webhooksFor(t, admission.ConfigName, b), "configmaps")
	})
	if failed := env.logs.lines(`cannot remove namespaced webhooks`); len(failed) > 0 {
		t.Errorf("removal failed: %q", failed)
	}
	if !intercepts(webhooksFor(t, admission.ConfigName, a), "services") {
		t.Errorf("the webhook of %s went too", a)
	}
}

// TestClusterRuleOnSecretsPrintsNoData: a PortalClusterRule may match
// Secrets, and its denials, errors and Portal's logs never print their
// values.
func TestClusterRuleOnSecretsPrintsNoData(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "adm-secrets"
	namespace(t, ns, nil)
	secretGVK := policyv1alpha1.GroupVersionKind{Version: "v1", Kind: "Secret"}
	putRule(t, "adm-secrets", simpleRule("adm-secrets", ns, secretGVK, `object.data.password != "eHl6"`, "weak password in {{ object.data }}", "deny"), "secrets")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Data: map[string][]byte{"password": []byte("hunter2")}}
	// hunter2 as the API server sends it, and as a rule could decode it.
	leaks := []string{"aHVudGVyMg==", "hunter2"}

	err := env.client.Create(ctx, sec.DeepCopy(), client.DryRunAll)
	if err == nil {
		t.Fatal("the Secret was admitted")
	}
	mustContain(t, "denial", err.Error(), "[adm-secrets] weak password in map[password:<redacted>]")
	t.Logf("denied: %v", err)
	denials := []error{err}

	putRule(t, "adm-secrets", simpleRule("adm-secrets", ns, secretGVK, `int(object.data.password) > 0`, "unused", "deny"), "secrets")
	err = env.client.Create(ctx, sec.DeepCopy(), client.DryRunAll)
	if err == nil {
		t.Fatal("the Secret was admitted despite the rule's error (onError deny)")
	}
	mustContain(t, "denial", err.Error(), "[adm-secrets] evaluation error: evaluating the rule failed: the error text is withheld")
	denials = append(denials, err)
	eventually(t, "the evaluation error to be logged", func() bool {
		return len(env.logs.lines(`admission rule evaluation failed`, `"rule":"adm-secrets"`)) > 0
	})
	for _, leak := range leaks {
		for _, err := range denials {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("the denial prints the Secret's value %q: %v", leak, err)
			}
		}
		if lines := env.logs.lines(leak); len(lines) > 0 {
			t.Errorf("Portal's log prints the Secret's value %q: %q", leak, lines)
		}
	}
}
