package waf

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/binding"
	"github.com/vilaca/portal/internal/waf/cache"
)

// bindingKinds are the kinds the binding controller watches beside the
// RuleSets: without any of them it does not run.
// gatewayGV is the Gateway API's v1.
var gatewayGV = schema.GroupVersion{Group: gatewayv1.GroupName, Version: "v1"}

var bindingKinds = []schema.GroupVersionKind{
	gatewayGV.WithKind("Gateway"),
	gatewayGV.WithKind("HTTPRoute"),
	gatewayGV.WithKind("GRPCRoute"),
	gatewayGV.WithKind("ReferenceGrant"),
	wafv1alpha1.GroupVersion.WithKind("WAFGatewayBindingPolicy"),
	wafv1alpha1.GroupVersion.WithKind("RuleSetOverride"),
}

// setupBinding adds the WAFGatewayBindingPolicy controller when the
// cluster serves the Gateway API (v1 Gateway, HTTPRoute, GRPCRoute,
// ReferenceGrant) and Portal's binding CRDs; otherwise it logs why not and
// returns nil: the rest of the WAF layer does not need them. The Gateway
// API types are added to the manager's scheme here.
func setupBinding(mgr ctrl.Manager, c *cache.Cache, bundles *bundleAdapter, log *slog.Logger, reg prometheus.Registerer) (*binding.Controller, error) {
	if !mgr.GetScheme().IsVersionRegistered(gatewayGV) {
		if err := gatewayv1.Install(mgr.GetScheme()); err != nil {
			return nil, fmt.Errorf("waf: add the Gateway API types to the scheme: %w", err)
		}
	}
	for _, gvk := range bindingKinds {
		if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			log.Warn("WAF attachment to Gateway API routes is off: the cluster does not serve a kind it needs; install it and restart Portal",
				"kind", gvk.String(), "error", err)
			return nil, nil
		}
	}
	var fetcher binding.BundleFetcher
	if bundles != nil {
		fetcher = bundles
	}
	ctl, err := binding.New(mgr, binding.Options{Cache: c, Bundles: fetcher, Logger: log, Metrics: binding.NewMetrics(reg)})
	if err != nil {
		return nil, err
	}
	if bundles != nil {
		bundles.mu.Lock()
		bundles.trigger = ctl.Trigger
		bundles.mu.Unlock()
	}
	return ctl, ctl.SetupWithManager(mgr)
}
