package exception_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/exception"
)

func spec() *policyv1alpha1.ExceptionSpec {
	return &policyv1alpha1.ExceptionSpec{
		Rules:  []string{"no-privileged"},
		Match:  policyv1alpha1.ExceptionMatch{GVK: []policyv1alpha1.GroupVersionKind{{Kind: "Pod"}}},
		Reason: "vendor image",
	}
}

// TestFromSpecRefusesWhatTheSchemaCannotBound: a selector past 32 terms or
// 256 values, match.namespaces on a PortalException, an empty reason or
// rule list, and an unknown mode are refused with a message naming them; a
// PortalClusterException keeps its namespaces and has no namespace of its
// own.
func TestFromSpecRefusesWhatTheSchemaCannotBound(t *testing.T) {
	for name, tc := range map[string]struct {
		kind string
		mut  func(*policyv1alpha1.ExceptionSpec)
		want string
	}{
		"terms": {exception.KindNamespaced, func(s *policyv1alpha1.ExceptionSpec) {
			s.Match.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{}}
			for i := range 33 {
				s.Match.LabelSelector.MatchLabels[fmt.Sprint(i)] = "v"
			}
		}, "33 terms"},
		"values": {exception.KindNamespaced, func(s *policyv1alpha1.ExceptionSpec) {
			s.Match.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "In", Values: make([]string, 257)}}}
		}, "257 values"},
		"namespaces": {exception.KindNamespaced, func(s *policyv1alpha1.ExceptionSpec) {
			s.Match.Namespaces = &policyv1alpha1.NamespaceMatch{Include: []string{"*"}}
		}, "only in its own namespace"},
		"reason": {exception.KindCluster, func(s *policyv1alpha1.ExceptionSpec) { s.Reason = "" }, "reason is required"},
		"rules":  {exception.KindCluster, func(s *policyv1alpha1.ExceptionSpec) { s.Rules = nil }, "rules is empty"},
		"mode":   {exception.KindCluster, func(s *policyv1alpha1.ExceptionSpec) { s.Modes = []policyv1alpha1.ExceptionMode{"always"} }, `"always"`},
		// Which Secrets it exempts would answer its condition about their
		// data, a bit at a time, to someone who may not read them.
		"secret": {exception.KindNamespaced, func(s *policyv1alpha1.ExceptionSpec) {
			s.Match.GVK = append(s.Match.GVK, policyv1alpha1.GroupVersionKind{Version: "v1", Kind: "Secret"})
		}, "match.gvk[1]: PortalExceptions cannot match Secrets"},
	} {
		s := spec()
		tc.mut(s)
		if _, err := exception.FromSpec(s, tc.kind, "billing", "x"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", name, err, tc.want)
		}
	}
	s := spec()
	s.Match.Namespaces = &policyv1alpha1.NamespaceMatch{Include: []string{"ci-*"}}
	x, err := exception.FromSpec(s, exception.KindCluster, "ignored", "ci")
	if err != nil || x.Namespace != "" || x.Match.Namespaces.Include[0] != "ci-*" || x.Ref() != "ci" {
		t.Errorf("cluster exception: %+v, %v", x, err)
	}
}

// TestNamespaceAllowed: --exception-namespaces takes names and globs; empty
// allows every namespace.
func TestNamespaceAllowed(t *testing.T) {
	for _, tc := range []struct {
		allowed []string
		ns      string
		want    bool
	}{
		{nil, "anything", true},
		{[]string{"portal-exceptions"}, "portal-exceptions", true},
		{[]string{"portal-exceptions"}, "team-a", false},
		{[]string{"team-*"}, "team-a", true},
		{[]string{"team-*"}, "other", false},
	} {
		if got := exception.NamespaceAllowed(tc.allowed, tc.ns); got != tc.want {
			t.Errorf("NamespaceAllowed(%v, %q) = %v, want %v", tc.allowed, tc.ns, got, tc.want)
		}
	}
}
