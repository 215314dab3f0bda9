package helm_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/actions"
)

// chartActions reads the chart's list of response actions, value key to
// action type, from the portal.actionTypes helper: the one place the chart
// names them.
func chartActions(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("portal", "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	def := regexp.MustCompile(`(?s)define "portal.actionTypes".*?range \$pair := list (.*?) \}\}`).FindSubmatch(src)
	if def == nil {
		t.Fatal("no pair list in portal.actionTypes of _helpers.tpl")
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`\(list "([A-Za-z]+)" "([a-z-]+)"\)`).FindAllSubmatch(def[1], -1) {
		out[string(m[1])] = string(m[2])
	}
	return out
}

// TestChartKnowsEveryRegisteredAction: every action type the actions
// registry holds has its actions.<key> in the chart (the helper's pair
// list, values.yaml and values.schema.json) and nothing else is there: a
// new action registered without its chart wiring, or a chart value for an
// action that no longer exists, fails here.
func TestChartKnowsEveryRegisteredAction(t *testing.T) {
	pairs := chartActions(t)
	types := slices.Sorted(maps.Values(pairs))
	if !slices.Equal(types, slices.Sorted(slices.Values(actions.Types()))) {
		t.Fatalf("the chart's actions (portal.actionTypes in _helpers.tpl) are %v; the registry's are %v", types, actions.Types())
	}
	var schema struct {
		Properties struct {
			Actions struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"actions"`
		} `json:"properties"`
	}
	readValuesSchema(t, &schema)
	var values struct {
		Actions map[string]any `json:"actions"`
	}
	raw, err := os.ReadFile(filepath.Join("portal", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	for key, typ := range pairs {
		if _, ok := schema.Properties.Actions.Properties[key]; !ok {
			t.Errorf("values.schema.json has no actions.%s for action %s", key, typ)
		}
		if _, ok := values.Actions[key].(map[string]any); !ok {
			t.Errorf("values.yaml has no actions.%s for action %s", key, typ)
		}
	}
}

// TestChartGrantsEachActionItsPermissions: with one response action
// enabled in Helm, the chart grants Portal's ServiceAccount every
// permission that action needs, the ones its ActionsReady condition
// checks: enabling an action in the chart never leaves it reported as
// lacking RBAC. The actions are the chart's own list, which
// TestChartKnowsEveryRegisteredAction keeps equal to the registry.
func TestChartGrantsEachActionItsPermissions(t *testing.T) {
	for value, typ := range chartActions(t) {
		perms, ok := actions.Permissions(typ)
		if !ok {
			t.Fatalf("no action type %q", typ)
		}
		if len(perms) == 0 {
			continue // alertmanager: no API request
		}
		t.Run(typ, func(t *testing.T) {
			manifest, err := render(t, "", "audit.enabled=true", "actions."+value+".enabled=true", "fullnameOverride=rbac-"+strings.ToLower(value))
			if err != nil {
				t.Fatal(err)
			}
			sas := applyRBAC(t, manifest)
			var want []access
			for _, p := range perms {
				want = append(want, access{verb: p.Verb, group: p.Group, resource: p.Resource, sub: p.Subresource, want: true})
			}
			checkEveryPortalAccount(t, sas, want)
		})
	}
}

// checkEveryPortalAccount checks want for every ServiceAccount of the render
// that runs Portal (not the uninstall hook's).
func checkEveryPortalAccount(t *testing.T, sas map[string]string, want []access) {
	t.Helper()
	var q []access
	for who := range sas {
		if who == "uninstall" {
			continue
		}
		for _, a := range want {
			a.who = who
			q = append(q, a)
		}
	}
	if len(q) == 0 {
		t.Fatalf("the render has no Portal ServiceAccount: %v", sas)
	}
	checkAccess(t, sas, q)
}
