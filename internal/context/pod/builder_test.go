package pod

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestGenericNamesAreWhatGenericBinds: the engine declares GenericNames to
// the expression language, so a name Generic binds but does not list
// could not be read by any rule.
func TestGenericNamesAreWhatGenericBinds(t *testing.T) {
	ec, err := Generic{}.Build(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var bound []string
	for k := range ec.Env {
		bound = append(bound, k)
	}
	slices.Sort(bound)
	names := slices.Sorted(slices.Values(GenericNames()))
	if !slices.Equal(bound, names) {
		t.Errorf("Generic binds %v, GenericNames lists %v", bound, names)
	}
}
