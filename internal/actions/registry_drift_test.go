package actions_test

import (
	"os"
	"testing"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/rule"
)

// TestCRDEnumIsTheRegistry: the action types the PortalRule and
// PortalClusterRule CRDs accept (spec.actions[].type) are exactly the
// registered ones, so the API server neither refuses a registered action
// nor accepts one Portal cannot run. The enum is a kubebuilder marker on
// api/policy/v1alpha1.Action.Type; this reads the generated CRDs.
func TestCRDEnumIsTheRegistry(t *testing.T) {
	for _, crd := range []string{"portal.io_portalclusterrules.yaml", "portal.io_portalrules.yaml"} {
		raw, err := os.ReadFile("../../deploy/crds/" + crd)
		if err != nil {
			t.Fatal(err)
		}
		enum, err := actions.CRDEnum(raw)
		if err != nil {
			t.Fatalf("%s: %v", crd, err)
		}
		for _, d := range actions.EnumDrift(enum) {
			t.Errorf("%s: %s", crd, d)
		}
	}
}

// TestRuleLoaderKnowsTheRegistry: the rule loader, which imports no layer,
// accepts exactly the registered action types.
func TestRuleLoaderKnowsTheRegistry(t *testing.T) {
	for _, d := range actions.LoaderDrift(rule.ActionTypes()) {
		t.Error(d)
	}
}
