// Package apigateway is Portal's L7 API exposure layer (seed 002, Kyma's
// API Gateway): APIGateway runs the default Istio Gateway, APIRule becomes a
// VirtualService with AuthorizationPolicies and RequestAuthentications, and
// RateLimit becomes an EnvoyFilter with Envoy's local rate limit.
package apigateway

import (
	"log/slog"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/apigateway/apirule"
	"github.com/vilaca/portal/internal/apigateway/ratelimit"
)

// Options configure the layer.
type Options struct {
	Logger *slog.Logger
	// IngressPrincipal is the SPIFFE identity of the ingress gateway, the
	// only caller the generated AuthorizationPolicies allow.
	IngressPrincipal string
	// APIRuleResync and RateLimitResync are how often unchanged objects are
	// reconciled again; GatewayResync the same for the APIGateway.
	APIRuleResync, RateLimitResync, GatewayResync time.Duration
	// JWKSAllowInternal are the internal hosts (CIDRs, IP addresses, host
	// names, *.<domain>) an APIRule's jwksUri may name; see
	// apirule.ValidateJWKS.
	JWKSAllowInternal []string
}

// DefaultOptions are the layer's defaults, as the anchor's.
func DefaultOptions() Options {
	return Options{
		IngressPrincipal: apirule.DefaultIngressPrincipal,
		APIRuleResync:    apirule.DefaultResync,
		RateLimitResync:  ratelimit.DefaultResync,
		GatewayResync:    DefaultGatewayResync,
	}
}

// Setup adds the APIGateway, APIRule and RateLimit controllers to mgr. The
// manager's scheme must know the gateway.portal.io kinds and Istio's
// networking and security kinds, and the cluster must serve Istio's CRDs.
func Setup(mgr ctrl.Manager, o Options) error {
	d := DefaultOptions()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.IngressPrincipal == "" {
		o.IngressPrincipal = d.IngressPrincipal
	}
	if o.GatewayResync == 0 {
		o.GatewayResync = d.GatewayResync
	}
	if err := setupGateway(mgr, o.Logger, o.GatewayResync); err != nil {
		return err
	}
	allow, err := apirule.ParseJWKSAllow(o.JWKSAllowInternal)
	if err != nil {
		return err
	}
	if err := apirule.Setup(mgr, apirule.Options{Logger: o.Logger, IngressPrincipal: o.IngressPrincipal, Resync: o.APIRuleResync, JWKSAllow: allow}); err != nil {
		return err
	}
	return ratelimit.Setup(mgr, ratelimit.Options{Logger: o.Logger, Resync: o.RateLimitResync})
}
