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
