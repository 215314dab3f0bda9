package engine

import (
	"errors"
	"fmt"
	"testing"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// An Engine that no retry can provision (no image configured anywhere) is
// refused in its status, and not returned as a reconcile error, which
// controller-runtime would log at ERROR and retry with backoff forever
// (portal dev without --node logged it 14 times in a minute). A transient
// error still is one.
func TestRefusalOfUnfixableErrors(t *testing.T) {
	for _, c := range []struct {
		err            error
		result, reason string
		refused        bool
	}{
		{&noImage{what: "waf-proxy", field: "spec.driver.wafProxy.image", flag: "--waf-proxy-image"}, ResultFailed, wafv1alpha1.ReasonProvisioningFailed, true},
		{fmt.Errorf("provision: %w", &noImage{what: "Coraza WASM plugin", field: "spec.driver.wasm.image", flag: "--waf-wasm-image"}), ResultFailed, wafv1alpha1.ReasonProvisioningFailed, true},
		{&imageNotAllowed{image: "x", field: "spec.driver.wafProxy.image"}, ResultImageNotAllowed, wafv1alpha1.ReasonImageNotAllowed, true},
		{&targetServiceNotFound{namespace: "web", gateway: "edge"}, ResultTargetServiceNotFound, wafv1alpha1.ReasonTargetServiceNotFound, true},
		{errors.New("the cache's CA is not issued yet"), "", "", false},
	} {
		result, reason, ok := refusal(c.err)
		if result != c.result || reason != c.reason || ok != c.refused {
			t.Errorf("%v: got %q %q %v, want %q %q %v", c.err, result, reason, ok, c.result, c.reason, c.refused)
		}
	}
	if got := (&noImage{what: "waf-proxy", field: "spec.driver.wafProxy.image", flag: "--waf-proxy-image"}).Error(); got != "no waf-proxy image: set spec.driver.wafProxy.image or Portal's --waf-proxy-image" {
		t.Errorf("message %q", got)
	}
}
