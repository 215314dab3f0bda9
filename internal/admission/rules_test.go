package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// putRule creates or replaces the PortalClusterRule name and waits until the
// engine holds that version of it and the webhook configuration covers
// resource. The rule is deleted when the test ends.
func putRule(t *testing.T, name string, spec policyv1alpha1.RuleSpec, resource string) {
	t.Helper()
	ctx := context.Background()
	pcr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: name}}
	err := env.client.Get(ctx, types.NamespacedName{Name: name}, pcr)
	switch {
	case apierrors.IsNotFound(err):
		pcr.Spec = spec
		if err := env.client.Create(ctx, pcr); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deleteRule(t, name) })
	case err != nil:
		t.Fatal(err)
	default:
		devtest.Update(t, env.client, pcr, func() { pcr.Spec = spec })
	}
	ruleName := spec.Name
	if ruleName == "" {
		ruleName = name
	}
	eventually(t, "rule "+ruleName+" loaded", func() bool {
		for _, r := range env.engine.Rules() {
			if r.Name == ruleName && r.Expression == spec.Rule &&
				(spec.EnforcementAction == "" || string(r.EnforcementAction) == string(spec.EnforcementAction)) &&
				(spec.OnError == "" || string(r.OnError) == string(spec.OnError)) {
				return true
			}
		}
		return false
	})
	if resource != "" {
		waitCovered(t, admission.ConfigName, resource, true)
	}
}

func deleteRule(t *testing.T, name string) {
	pcr := &policyv1alpha1.PortalClusterRule{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.client.Delete(context.Background(), pcr); client.IgnoreNotFound(err) != nil {
		t.Errorf("delete rule %s: %v", name, err)
	}
}

// webhookResources lists the resources the named configuration intercepts.
func webhookResources(t *testing.T, name string) []string {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.client.Get(context.Background(), types.NamespacedName{Name: name}, vwc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	var out []string
	for _, wh := range vwc.Webhooks {
		for _, r := range wh.Rules {
			out = append(out, r.Resources...)
		}
	}
	return out
}

// waitCovered waits until the named configuration does or does not
// intercept resource. A Portal started by the test applies its first
// configuration with backoff, which on a busy CI machine has taken longer
// than eventually's 20 s: this waits a minute.
func waitCovered(t *testing.T, name, resource string, covered bool) {
	t.Helper()
	eventuallyWithin(t, time.Minute, fmt.Sprintf("webhook configuration %s covering %s: %v", name, resource, covered), func() bool {
		return slices.Contains(webhookResources(t, name), resource) == covered
	})
}

// exampleRule reads a rule of the pod-security bundle, limited to namespace
// ns and to admission.
func exampleRule(t *testing.T, file, ns string) policyv1alpha1.RuleSpec {
	t.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "examples", "rules", "pod-security", file))
	if err != nil {
		t.Fatal(err)
	}
	var spec policyv1alpha1.RuleSpec
	if err := yaml.UnmarshalStrict(data, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Mode = []policyv1alpha1.Mode{policyv1alpha1.Mode(core.ModeAdmission)}
	spec.Match.Namespaces = &policyv1alpha1.NamespaceMatch{Include: []string{ns}}
	return spec
}

// simpleRule is an admission rule for one kind in namespace ns.
func simpleRule(name, ns string, gvk policyv1alpha1.GroupVersionKind, expr, message string, action policyv1alpha1.EnforcementAction) policyv1alpha1.RuleSpec {
	return policyv1alpha1.RuleSpec{
		Name:              name,
		Mode:              []policyv1alpha1.Mode{policyv1alpha1.Mode(core.ModeAdmission)},
		EnforcementAction: action,
		Match: policyv1alpha1.Match{
			GVK:        []policyv1alpha1.GroupVersionKind{gvk},
			Namespaces: &policyv1alpha1.NamespaceMatch{Include: []string{ns}},
		},
		Rule:    expr,
		Message: message,
	}
}

var (
	podGVK       = policyv1alpha1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	configMapGVK = policyv1alpha1.GroupVersionKind{Kind: "ConfigMap"}
)

// pod returns a pod whose containers are privileged as listed.
func pod(ns, name string, privileged ...bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	for i, priv := range privileged {
		c := corev1.Container{Name: string(rune('a' + i)), Image: "nginx:1.27"}
		if priv {
			c.SecurityContext = &corev1.SecurityContext{Privileged: &priv}
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

func configMap(ns, name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}}
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
