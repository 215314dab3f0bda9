package bundle_test

import (
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/waf/bundle"
)

func TestAccess(t *testing.T) {
	a, err := bundle.NewAccess([]string{"s3://bundles/tenants/", "s3://published/"}, []string{"s3://bundles/shared/"})
	if err != nil {
		t.Fatal(err)
	}
	for loc, want := range map[string]bool{
		"s3://bundles/tenants/shop/rules.json":   true,
		"s3://bundles/tenants/shop/a/b/c.json":   true,
		"s3://published/shop/rs/x.json":          true,
		"s3://bundles/shared/crs.json":           true,
		"s3://bundles/tenants/team-a/rules.json": false,
		"s3://bundles/tenants/shop-2/rules.json": false,
		"s3://bundles/tenants/shoprules.json":    false,
		"s3://bundles/shop/rules.json":           false,
		"s3://bundles/sharedx/crs.json":          false,
		"s3://other/tenants/shop/rules.json":     false,
		"s3://published/team-a/shop/x.json":      false,
	} {
		l, err := bundle.ParseLocation(loc)
		if err != nil {
			t.Fatal(err)
		}
		err = a.Check("shop", l)
		if got := err == nil; got != want {
			t.Errorf("shop reads %s: %v, want %v", loc, got, want)
		}
		if err != nil && (bundle.Reason(err) != bundle.ReasonLocationNotAllowed || !strings.Contains(err.Error(), "s3://bundles/tenants/shop/, s3://published/shop/, s3://bundles/shared/")) {
			t.Errorf("refusal of %s: %s %v, want LocationNotAllowed naming what shop may read", loc, bundle.Reason(err), err)
		}
	}
	none, err := bundle.NewAccess(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := bundle.ParseLocation("s3://bundles/shop/x.json")
	for _, acc := range []*bundle.Access{none, nil} {
		if err := acc.Check("shop", l); err == nil || !strings.Contains(err.Error(), "may read no bundle location") {
			t.Errorf("with no root: %v, want a refusal", err)
		}
	}
	for _, bad := range []string{"bundles/", "s3://bundles", "s3://bundles/tenants", "s3://Bundles/", "s3://bundles/a/../", "s3://bundles//"} {
		if _, err := bundle.NewAccess([]string{bad}, nil); err == nil {
			t.Errorf("root %q accepted", bad)
		}
	}
}
