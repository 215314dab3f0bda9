package engine_test

import (
	"fmt"
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// A PortalRule whose match.namespaces leaves out its own namespace never
// applies: it is a load error, not a Ready rule that never fires.
func TestPortalRuleMustMatchItsOwnNamespace(t *testing.T) {
	for _, c := range []struct {
		include, exclude []string
		want             string
	}{
		{include: []string{"prod"}, want: `rule "r": match.namespaces.include [prod] leaves out demo, the PortalRule's own namespace and the only one it may match, so it would never apply: drop include, or use a PortalClusterRule`},
		{exclude: []string{"de*"}, want: `rule "r": match.namespaces.exclude [de*] excludes demo, the PortalRule's own namespace and the only one it may match, so it would never apply`},
		{include: []string{"prod", "de*"}, exclude: []string{"kube-*"}, want: "<nil>"},
	} {
		r := newRule("r", "true")
		r.Namespace = "demo"
		r.Match.Namespaces = core.NamespaceMatch{Include: c.include, Exclude: c.exclude}
		_, err := engine.New(exprlang.New()).Compile(r)
		if fmt.Sprint(err) != c.want {
			t.Errorf("include %v exclude %v: got %v\nwant %s", c.include, c.exclude, err, c.want)
		}
		// The same match on a cluster rule is fine: it names other namespaces.
		r.Namespace = ""
		if _, err := engine.New(exprlang.New()).Compile(r); err != nil {
			t.Errorf("cluster rule with include %v exclude %v: %v", c.include, c.exclude, err)
		}
	}
}
