package engine_test

import (
	"slices"
	"strings"
	"testing"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/driver"
	"github.com/vilaca/portal/internal/waf/driver/drivertest"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// TestEngineCRDEnumMatchesRegistry: the Engine CRD's spec.driver.type enum
// offers exactly the registered drivers. A driver registered without its
// enum value (the kubebuilder marker on DriverType in api/waf/v1alpha1,
// then make generate), or an enum value whose driver is gone, fails here.
func TestEngineCRDEnumMatchesRegistry(t *testing.T) {
	enum, err := drivertest.EngineCRDEnum()
	if err != nil {
		t.Fatal(err)
	}
	if drift := driver.EnumDrift(enum); len(drift) > 0 {
		t.Fatalf("the Engine CRD and the driver registry differ:\n%s", strings.Join(drift, "\n"))
	}
	if got := driver.Names(); !slices.Contains(got, driver.Default) {
		t.Fatalf("the default driver %q is not registered (%v)", driver.Default, got)
	}
}

// TestIstioWASMLimitsOnCRS: the istio-wasm driver's limits find, in the full
// OWASP CRS, the rules the Istio WASM build cannot run, and the rules using
// an operator TinyGo's Coraza runs as @unconditionalMatch; the waf-proxy
// has no limits.
func TestIstioWASMLimitsOnCRS(t *testing.T) {
	wasm, ok := driver.Lookup(wafv1alpha1.DriverIstioWASM)
	if !ok {
		t.Fatal("istio-wasm is not registered")
	}
	proxy, ok := driver.Lookup(wafv1alpha1.DriverWAFProxy)
	if !ok {
		t.Fatal("waf-proxy is not registered")
	}
	if !proxy.Limits().Empty() {
		t.Errorf("waf-proxy limits %+v, want none", proxy.Limits())
	}
	compile := func(src ruleset.Source, data map[string][]byte) *ruleset.Compiled {
		c, err := ruleset.Compile(ruleset.Join([]ruleset.Source{src}, data), ruleset.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	crs := compile(ruleset.Source{Name: "crs", Rules: "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nInclude @owasp_crs/*.conf\n"}, nil)
	found := map[int]bool{}
	for _, f := range crs.Unsupported(wasm.Name(), wasm.Limits()) {
		found[f.RuleID] = f.Driver == wafv1alpha1.DriverIstioWASM
	}
	for _, id := range []int{920171, 941310, 920100, 942280} {
		if !found[id] {
			t.Errorf("the full CRS's istio-wasm findings miss rule %d", id)
		}
	}
	schema := compile(ruleset.Source{Name: "api", Rules: "SecRule REQUEST_BODY \"@validateSchema schema.json\" \"id:77,phase:2,deny\"\n"},
		map[string][]byte{"schema.json": []byte(`{"type":"object"}`)})
	f := schema.Unsupported(wasm.Name(), wasm.Limits())
	if len(f) != 1 || f[0].RuleID != 77 || f[0].Operator != "validateSchema" || !strings.Contains(f[0].Reason, "@unconditionalMatch") {
		t.Fatalf("validateSchema findings: %v", f)
	}
}
