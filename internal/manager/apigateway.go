package manager

import (
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/apigateway"
	"github.com/vilaca/portal/internal/apigateway/apirule"
)

// apiGatewayLayer is the L7 API exposure layer (APIGateway, APIRule,
// RateLimit -> Istio configuration).
type apiGatewayLayer struct{ opts apigateway.Options }

func (*apiGatewayLayer) Name() string { return "apigateway" }

// metricsSections implements registeredLayer.
func (*apiGatewayLayer) metricsSections() []MetricsSection {
	return nil
}

// Provide offers nothing: API exposure neither feeds nor reads another
// layer.
func (*apiGatewayLayer) Provide(*Board) error { return nil }

func (l *apiGatewayLayer) Setup(d Deps) error {
	o := l.opts
	o.Logger = d.Logger
	return apigateway.Setup(d.Manager, o)
}

func (*apiGatewayLayer) fromConfig(cfg *Config) (Layer, error) {
	if !cfg.APIGateway {
		return nil, nil
	}
	return &apiGatewayLayer{opts: cfg.APIGatewayOptions}, nil
}

func (*apiGatewayLayer) AddFlags(f *pflag.FlagSet, cfg *Config) {
	g := &cfg.APIGatewayOptions
	f.BoolVar(&cfg.APIGateway, "apigateway", cfg.APIGateway, "run the API exposure layer: APIGateway, APIRule and RateLimit generating Istio configuration (L7; needs Istio's CRDs)")
	f.StringVar(&g.IngressPrincipal, "apigateway-ingress-principal", g.IngressPrincipal, "SPIFFE identity of the Istio ingress gateway, the only caller the AuthorizationPolicies generated for APIRules allow")
	f.DurationVar(&g.APIRuleResync, "apigateway-apirule-resync", g.APIRuleResync, "reconcile unchanged APIRules this often, repairing hand edits of their Istio objects")
	f.DurationVar(&g.RateLimitResync, "apigateway-ratelimit-resync", g.RateLimitResync, "reconcile unchanged RateLimits this often")
	f.DurationVar(&g.GatewayResync, "apigateway-gateway-resync", g.GatewayResync, "reconcile the unchanged APIGateway this often")
	f.StringSliceVar(&g.JWKSAllowInternal, "apigateway-jwks-allow-internal", g.JWKSAllowInternal, "internal hosts an APIRule's jwksUri may name, repeated or comma-separated: CIDRs, IP addresses, host names or *.<domain>; istiod fetches jwksUri from inside the cluster, so loopback, link-local, private and cluster-internal hosts are refused otherwise")
}

// CheckFlags refuses a malformed --apigateway-jwks-allow-internal before
// anything starts; the other settings are left to apigateway.Setup.
func (*apiGatewayLayer) CheckFlags(cfg *Config) error {
	if !cfg.APIGateway {
		return nil
	}
	_, err := apirule.ParseJWKSAllow(cfg.APIGatewayOptions.JWKSAllowInternal)
	return err
}
