package actions_test

import (
	"os"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/rule"
)

// TestCRDEnumIsTheRegistry: the action types the PortalRule and
// PortalClusterRule CRDs accept (spec.actions[].type) are exactly the
// registered ones, so the API server neither refuses a registered action
// nor accepts one Portal cannot run. The enum is a kubebuilder marker on
// api/policy/v1alpha1.Action.Type; this reads the generated CRDs.
func TestCRDEnumIsTheRegistry(t *testing.T) {
	want := slices.Sorted(slices.Values(actions.Types()))
	for _, crd := range []string{"portal.io_portalclusterrules.yaml", "portal.io_portalrules.yaml"} {
		raw, err := os.ReadFile("../../deploy/crds/" + crd)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Spec struct {
				Versions []struct {
					Schema struct {
						OpenAPIV3Schema struct {
							Properties struct {
								Spec struct {
									Properties struct {
										Actions struct {
											Items struct {
												Properties struct {
													Type struct {
														Enum []string `json:"enum"`
													} `json:"type"`
												} `json:"properties"`
											} `json:"items"`
										} `json:"actions"`
									} `json:"properties"`
								} `json:"spec"`
							} `json:"properties"`
						} `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Spec.Versions) == 0 {
			t.Fatalf("%s: no versions", crd)
		}
		got := slices.Sorted(slices.Values(doc.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties.Actions.Items.Properties.Type.Enum))
		if !slices.Equal(got, want) {
			t.Errorf("%s accepts action types %v; the registry holds %v: change the Enum marker on Action.Type and run make generate", crd, got, want)
		}
	}
}

// TestRuleLoaderKnowsTheRegistry: the rule loader, which imports no layer,
// accepts exactly the registered action types.
func TestRuleLoaderKnowsTheRegistry(t *testing.T) {
	if got, want := slices.Sorted(slices.Values(rule.ActionTypes())), slices.Sorted(slices.Values(actions.Types())); !slices.Equal(got, want) {
		t.Errorf("rule.ActionTypes() = %v; the registry holds %v: add the type in internal/rule/convert.go", got, want)
	}
}
