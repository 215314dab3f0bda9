package actions

import (
	"errors"
	"fmt"
	"slices"

	"sigs.k8s.io/yaml"
)

// What the drift tests hold to the registry: the rule CRDs' enum of
// spec.actions[].type (TestCRDEnumIsTheRegistry), the rule loader's list
// (TestRuleLoaderKnowsTheRegistry) and, in deploy/helm, the chart's action
// list and RBAC. The comparisons live here, not in the tests, so that an
// action registered from a test package shows it appears in them.

// EnumDrift compares the registry with an enum of spec.actions[].type: the
// registered types the enum lacks, and the values no action registers.
func EnumDrift(enum []string) []string {
	return drift(enum, "the PortalRule CRDs' spec.actions[].type enum",
		"change the Enum marker on Action.Type in api/policy/v1alpha1/rule_types.go and run make generate")
}

// LoaderDrift compares the registry with the types the rule loader accepts
// (rule.ActionTypes: the loader sits below the layers and imports none).
func LoaderDrift(loader []string) []string {
	return drift(loader, "the rule loader's ActionTypes", "edit ActionTypes in internal/rule/convert.go")
}

// CRDEnum reads the spec.actions[].type enum of a rule CRD's YAML.
func CRDEnum(raw []byte) ([]string, error) {
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
		return nil, fmt.Errorf("read CRD: %w", err)
	}
	if len(doc.Spec.Versions) == 0 {
		return nil, errors.New("the CRD has no versions")
	}
	return doc.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties.Spec.Properties.Actions.Items.Properties.Type.Enum, nil
}

func drift(listed []string, where, fix string) []string {
	var out []string
	for _, t := range Types() {
		if !slices.Contains(listed, t) {
			out = append(out, fmt.Sprintf("action %q is registered but not in %s: %s", t, where, fix))
		}
	}
	for _, v := range listed {
		if _, ok := registry[v]; !ok {
			out = append(out, fmt.Sprintf("%s names %q, which no action registers: %s", where, v, fix))
		}
	}
	return out
}
