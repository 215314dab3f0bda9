package helm_test

import (
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/actions"
)

// TestChartGrantsEachActionItsPermissions: with one response action
// enabled in Helm, the chart grants Portal's ServiceAccount every
// permission that action needs, the ones its ActionsReady condition
// checks: enabling an action in the chart never leaves it reported as
// lacking RBAC.
func TestChartGrantsEachActionItsPermissions(t *testing.T) {
	for value, typ := range map[string]string{
		"label": "label", "annotate": "annotate", "evict": "evict",
		"patchNetworkPolicy": "patch-networkpolicy", "revokeToken": "revoke-sa-token",
	} {
		t.Run(typ, func(t *testing.T) {
			perms, ok := actions.Permissions(typ)
			if !ok {
				t.Fatalf("no action type %q", typ)
			}
			manifest, err := render(t, "", "audit.enabled=true", "actions."+value+".enabled=true", "fullnameOverride=rbac-"+strings.ToLower(value))
			if err != nil {
				t.Fatal(err)
			}
			sas := applyRBAC(t, manifest)
			var q []access
			for who := range sas {
				if who == "uninstall" {
					continue
				}
				for _, p := range perms {
					q = append(q, access{who: who, verb: p.Verb, group: p.Group, resource: p.Resource, sub: p.Subresource, want: true})
				}
			}
			if len(q) == 0 {
				t.Fatalf("the render has no Portal ServiceAccount: %v", sas)
			}
			checkAccess(t, sas, q)
		})
	}
}
