package admission

import (
	"fmt"
	"slices"
	"testing"
)

// TestNamespaceGroupsAreBounded: namespaces with the same kinds share a
// webhook, each namespace is named once, and past MaxNamespacedWebhooks
// kind sets the smallest groups share the last webhook.
func TestNamespaceGroupsAreBounded(t *testing.T) {
	core := gv{"", "*"}
	perNS := map[string]map[gv]map[string]bool{}
	// Two tenants on configmaps, then one kind set per tenant past the
	// bound, plus one tenant whose only kind the cluster-wide webhook
	// already covers.
	for _, ns := range []string{"cm-1", "cm-2"} {
		perNS[ns] = map[gv]map[string]bool{core: {"configmaps": true}}
	}
	for i := range MaxNamespacedWebhooks + 5 {
		perNS[fmt.Sprintf("t-%02d", i)] = map[gv]map[string]bool{{"example.com", "*"}: {fmt.Sprintf("kind%02ds", i): true}}
	}
	perNS["covered"] = map[gv]map[string]bool{core: {"pods": true}}
	covered := map[gv]map[string]bool{core: {"pods": true}}

	groups, merged := groupNamespaces(perNS, covered)
	if len(groups) != MaxNamespacedWebhooks || merged != 7 {
		t.Fatalf("%d webhooks, %d merged groups; want %d and 7", len(groups), merged, MaxNamespacedWebhooks)
	}
	if !slices.Equal(groups[0].namespaces, []string{"cm-1", "cm-2"}) || len(groups[0].rules) != 1 || groups[0].rules[0].Resources[0] != "configmaps" {
		t.Errorf("first webhook: %v %v, want the configmaps of cm-1 and cm-2", groups[0].namespaces, describeRules(groups[0].rules))
	}
	seen := map[string]int{}
	for _, g := range groups {
		for _, ns := range g.namespaces {
			seen[ns]++
		}
	}
	if len(seen) != len(perNS)-1 || seen["covered"] != 0 {
		t.Errorf("namespaces named: %v; want each once, and none whose kinds the cluster-wide webhook covers", seen)
	}
	for ns, n := range seen {
		if n != 1 {
			t.Errorf("namespace %s in %d webhooks", ns, n)
		}
	}
	last := groups[len(groups)-1]
	if len(last.namespaces) != 7 || len(describeRules(last.rules)) != 7 {
		t.Errorf("last webhook: %d namespaces, resources %v; want the 7 merged groups' union", len(last.namespaces), describeRules(last.rules))
	}
}

func TestNumberedNamespacedNames(t *testing.T) {
	if namespacedName(0) != NamespacedWebhookName || isNumberedNamespacedName(NamespacedWebhookName) {
		t.Errorf("the first namespaced webhook must keep the name of earlier releases and never be removed")
	}
	for i := 1; i < MaxNamespacedWebhooks; i++ {
		if !isNumberedNamespacedName(namespacedName(i)) {
			t.Errorf("%s not recognised as a numbered namespaced webhook", namespacedName(i))
		}
	}
	if isNumberedNamespacedName(WebhookName) {
		t.Errorf("%s taken for a namespaced webhook", WebhookName)
	}
}
