package manager

import (
	"testing"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
)

// TestSchemeKnowsGatewayKinds: Portal's clients can read and write the
// gateway.portal.io kinds (no controller serves them yet).
func TestSchemeKnowsGatewayKinds(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"APIGateway", "APIRule", "RateLimit", "APIRuleList"} {
		if !s.Recognizes(gatewayv1alpha1.GroupVersion.WithKind(kind)) {
			t.Errorf("manager.Scheme() does not know %s", kind)
		}
	}
}
