package driver

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// What the drift tests hold to the registry: the Engine CRD's
// spec.driver.type enum (TestEngineCRDEnumMatchesRegistry) and the chart's
// RBAC (deploy/helm, TestChartGrantsEachDriverItsObjects). They live here,
// not in the tests, so that a driver registered from a test package can
// show it appears in them with no other edit.

// EnumDrift compares the registry with an enum of spec.driver.type: the
// drivers the enum lacks, and the values no registered driver serves.
func EnumDrift(enum []string) []string {
	var out []string
	for _, n := range Names() {
		if !slices.Contains(enum, string(n)) {
			out = append(out, fmt.Sprintf("driver %q is registered but not in the Engine CRD's spec.driver.type enum", n))
		}
	}
	for _, v := range enum {
		if _, ok := Lookup(wafv1alpha1.DriverType(v)); !ok {
			out = append(out, fmt.Sprintf("the Engine CRD's spec.driver.type enum offers %q, which no driver registers", v))
		}
	}
	return out
}

// Grant is one permission Portal needs for a driver's objects.
type Grant struct {
	Driver    wafv1alpha1.DriverType
	Verb      string
	Group     string
	Resource  string
	Namespace string
}

// Grants lists what every registered driver needs for the objects it owns
// for eng under s: get (whose the object is, before apply and teardown), patch (server-side apply) and delete (teardown). Give s
// every optional setting (OperatorName) to see every kind.
func Grants(s Settings, eng *wafv1alpha1.Engine) []Grant {
	var out []Grant
	for _, d := range All() {
		for _, o := range d.Owned(s, eng) {
			// The kinds drivers write are regular English plurals; a
			// RESTMapper would need the API server for the same answer.
			res, _ := meta.UnsafeGuessKindToResource(o.GVK)
			verbs := []string{"get", "patch", "delete"}
			if o.GVK.Group == "" && o.GVK.Kind == "Secret" {
				// Never read in tenants' namespaces (see engine's current).
				verbs = verbs[1:]
			}
			for _, verb := range verbs {
				g := Grant{Driver: d.Name(), Verb: verb, Group: o.GVK.Group, Resource: res.Resource, Namespace: o.Namespace}
				if !slices.Contains(out, g) {
					out = append(out, g)
				}
			}
		}
	}
	return out
}
