package rule

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// builtins indexes the kinds of the API groups built into Kubernetes, as
// client-go knows them: which groups hold each kind, and which groups are
// built in. Built once, read only.
var builtins = sync.OnceValue(func() builtinIndex {
	b := builtinIndex{kinds: map[string][]string{}, groups: map[string]bool{}}
	for gvk := range clientgoscheme.Scheme.AllKnownTypes() {
		b.groups[gvk.Group] = true
		if !slices.Contains(b.kinds[gvk.Kind], gvk.Group) {
			b.kinds[gvk.Kind] = append(b.kinds[gvk.Kind], gvk.Group)
		}
	}
	for _, gs := range b.kinds {
		// extensions is the deprecated home of kinds that moved: suggest
		// their current group first.
		slices.SortFunc(gs, func(a, b string) int {
			return cmp.Or(cmp.Compare(boolInt(a == "extensions"), boolInt(b == "extensions")), cmp.Compare(a, b))
		})
	}
	return b
})

type builtinIndex struct {
	kinds  map[string][]string
	groups map[string]bool
}

// checkBuiltinGroup refuses a kind paired with a built-in group that does
// not hold it, when another built-in group does: {group: "", kind:
// Deployment} loads, matches nothing and never fires. A custom group is the
// cluster's to serve, and a kind client-go does not know may be newer than
// it, so neither is refused.
func checkBuiltinGroup(i int, g policyv1alpha1.GroupVersionKind) error {
	b := builtins()
	if !b.groups[g.Group] {
		return nil
	}
	groups := b.kinds[g.Kind]
	if len(groups) == 0 || slices.Contains(groups, g.Group) {
		return nil
	}
	quoted := make([]string, len(groups))
	for j, gr := range groups {
		quoted[j] = fmt.Sprintf("%q", gr)
	}
	return fieldErr(fmt.Sprintf("match.gvk[%d]", i), "match.gvk[%d]: kind %s is not in group %q but in %s, so the rule would match nothing: write {group: %s, kind: %s}",
		i, g.Kind, g.Group, strings.Join(quoted, " or "), groups[0], g.Kind)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
