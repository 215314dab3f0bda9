package engine

import (
	"fmt"

	"github.com/vilaca/portal/internal/core"
)

// checkOwnNamespace refuses a PortalRule whose match.namespaces leaves out
// its own namespace, the only one it may match: it would load Ready and
// never apply.
func checkOwnNamespace(r *core.Rule) error {
	ns := r.Match.Namespaces
	switch {
	case r.Namespace == "":
		return nil
	case len(ns.Include) > 0 && !anyGlob(ns.Include, r.Namespace):
		return fmt.Errorf("rule %q: match.namespaces.include %v leaves out %s, the PortalRule's own namespace and the only one it may match, so it would never apply: drop include, or use a PortalClusterRule", r.Name, ns.Include, r.Namespace)
	case anyGlob(ns.Exclude, r.Namespace):
		return fmt.Errorf("rule %q: match.namespaces.exclude %v excludes %s, the PortalRule's own namespace and the only one it may match, so it would never apply", r.Name, ns.Exclude, r.Namespace)
	}
	return nil
}
