package helm_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/driver"
	_ "github.com/vilaca/portal/internal/waf/engine" // registers the built-in drivers
)

// TestChartGrantsEachDriverItsObjects: with the WAF enabled (and
// --operator-name, which adds the istio-wasm driver's mesh objects), the
// chart grants Portal's ServiceAccount patch and delete on every object
// each registered WAF engine driver owns, in an Engine's namespace: a
// driver registered without its chart RBAC fails here, before an Engine
// reports ProvisioningFailed (forbidden) in a cluster.
func TestChartGrantsEachDriverItsObjects(t *testing.T) {
	manifest, err := render(t, "", "waf.enabled=true", "extraArgs={--operator-name=portal}", "fullnameOverride=rbac-waf-drivers")
	if err != nil {
		t.Fatal(err)
	}
	sas := applyRBAC(t, manifest)
	eng := &wafv1alpha1.Engine{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge-waf"}}
	grants := driver.Grants(driver.Settings{Namespace: releaseNS, OperatorName: "portal"}, eng)
	if len(grants) == 0 {
		t.Fatal("no driver owns anything: is the registry empty?")
	}
	var want []access
	for _, g := range grants {
		want = append(want, access{verb: g.Verb, group: g.Group, resource: g.Resource, ns: g.Namespace, want: true})
	}
	checkEveryPortalAccount(t, sas, want)
}
