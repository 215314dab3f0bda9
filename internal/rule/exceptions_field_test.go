package rule_test

import (
	"strings"
	"testing"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/rule"
)

// TestExceptionsFieldDefaultsAndChecks: a rule without exceptions lets
// every exception apply; a value other than all, cluster or none is an
// error naming the field, for a rule file as for a custom resource.
func TestExceptionsFieldDefaultsAndChecks(t *testing.T) {
	spec := func(p string) *policyv1alpha1.RuleSpec {
		return &policyv1alpha1.RuleSpec{
			Exceptions: policyv1alpha1.ExceptionPolicy(p),
			Match:      policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "Pod"}}},
			Rule:       "object.metadata.name == 'x'",
		}
	}
	r, err := rule.FromSpec(spec(""), "r", core.Source{})
	if err != nil || r.Exceptions != core.ExceptionsAll {
		t.Fatalf("no exceptions field: %v %q, want all", err, r.Exceptions)
	}
	if r, err := rule.FromSpec(spec("cluster"), "r", core.Source{}); err != nil || r.Exceptions != core.ExceptionsCluster {
		t.Fatalf("exceptions: cluster: %v %v", err, r)
	}
	if _, err := rule.FromSpec(spec("sometimes"), "r", core.Source{}); err == nil || !strings.Contains(err.Error(), "exceptions") || !strings.Contains(err.Error(), "none") {
		t.Fatalf("exceptions: sometimes: %v, want an error naming the field and its values", err)
	}
}

// TestMatchBoundsHoldForRuleFiles: a rule file, which never passes the API
// server, is held to the CRD's bounds on match: 32 kinds, 64 namespace
// patterns of at most 253 characters, versions of at most 63.
func TestMatchBoundsHoldForRuleFiles(t *testing.T) {
	many := make([]string, 65)
	for i := range many {
		many[i] = "team-" + strings.Repeat("x", i%3)
	}
	kinds := make([]policyv1alpha1.GroupVersionKind, 33)
	for i := range kinds {
		kinds[i] = policyv1alpha1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	}
	for name, m := range map[string]policyv1alpha1.Match{
		"match.namespaces.include": {GVK: kinds[:1], Namespaces: &policyv1alpha1.NamespaceMatch{Include: many}},
		"match.namespaces.exclude": {GVK: kinds[:1], Namespaces: &policyv1alpha1.NamespaceMatch{Exclude: []string{strings.Repeat("n", 254)}}},
		"match.gvk has 33":         {GVK: kinds},
		"at most 253, 63 and 63":   {GVK: []policyv1alpha1.GroupVersionKind{{Version: strings.Repeat("v", 64), Kind: "Pod"}}},
	} {
		spec := &policyv1alpha1.RuleSpec{Match: m, Rule: "object.metadata.name == 'x'"}
		if _, err := rule.FromSpec(spec, "r", core.Source{}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it", name, err)
		}
	}
}
