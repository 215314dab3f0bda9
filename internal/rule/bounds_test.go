package rule_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// TestOversizedPatternIsRefusedAtLoad: a PortalRule whose literal pattern is
// longer than a pattern may be (16 KB of `.{1000}`, about 2.3 million
// instructions and 100 MB compiled: six such rules took portal dev past
// 1.6 GiB), or compiles to more instructions than it may, does not load; its
// status says which pattern and what to do, and a rule with a sane pattern in
// the same namespace loads.
func TestOversizedPatternIsRefusedAtLoad(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "bounds-pattern"
	if err := env.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	pattern := func(name, pattern string) *policyv1alpha1.PortalRule {
		return &policyv1alpha1.PortalRule{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: policyv1alpha1.RuleSpec{
				Match: policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "ConfigMap"}}},
				Rule:  `object.kind matches "` + pattern + `"`,
			},
		}
	}
	huge := pattern("huge-pattern", strings.Repeat(".{1000}", 2300))
	large := pattern("large-program", ".{1000}.{1000}.{1000}")
	sane := pattern("sane-pattern", "^tmp-[a-z0-9]{1,20}$")
	for _, pr := range []*policyv1alpha1.PortalRule{huge, large, sane} {
		if err := env.client.Create(ctx, pr); err != nil {
			t.Fatal(err)
		}
	}
	for pr, why := range map[*policyv1alpha1.PortalRule]string{
		huge:  "the pattern is 16100 bytes, longer than 4096",
		large: "instructions, more than 2000",
	} {
		eventually(t, pr.Name+" refused in status", func() bool {
			c, st := readyOf(t, env.client, pr)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == policyv1alpha1.ReasonInvalidRule &&
				strings.Contains(st.ParseError, why)
		})
	}
	eventually(t, "the sane pattern loaded", func() bool {
		c, _ := readyOf(t, env.client, sane)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	for _, r := range env.engine.Rules() {
		if r.Name == huge.Name || r.Name == large.Name {
			t.Fatalf("the oversized pattern's rule was loaded")
		}
	}
}

// TestRuleOnReportsIsRefused: a rule on the reports Portal writes its
// findings to, whose message quotes what each write changes, made Portal
// rewrite its report about 250 times a second, forever. The API server takes
// the PortalRule; the loader refuses it, saying why.
func TestRuleOnReportsIsRefused(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "bounds-reports"
	if err := env.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	pr := &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Name: "report-loop", Namespace: ns},
		Spec: policyv1alpha1.RuleSpec{
			Match:   policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Group: "wgpolicyk8s.io", Kind: "PolicyReport"}}},
			Rule:    "true",
			Message: "rv {{ object.metadata.resourceVersion }}",
		},
	}
	if err := env.client.Create(ctx, pr); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rule on reports refused in status", func() bool {
		c, st := readyOf(t, env.client, pr)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(st.ParseError, "is what Portal writes its findings to")
	})
}
