package apigateway_test

import (
	"strings"
	"testing"

	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway/apirule"
)

// allowedJWKSHost is the one internal host the shared manager lets a
// jwksUri name (--apigateway-jwks-allow-internal).
const allowedJWKSHost = "keycloak.idp.svc.cluster.local"

// TestAPIRuleInternalJWKSRefused: istiod fetches every jwksUri from inside
// the cluster, so a tenant's APIRule could point it at the cloud metadata
// service, istiod's own loopback, or another namespace's Services. Such an
// APIRule is refused with JWKSNotAllowed, saying which field and what to
// do, and gets no RequestAuthentication; a host the administrators allow
// is applied.
func TestAPIRuleInternalJWKSRefused(t *testing.T) {
	ctx := setup(t)
	const gw = "istio-system/jwks-gateway"
	istioGateway(t, ctx, "istio-system", "jwks-gateway", "*.jwks.example.net")
	ns := namespace(t, ctx, "jwks-tenant")
	workload(t, ctx, ns, "app", 8000, true, nil)
	withJWKS := func(name, uri string) *gatewayv1alpha1.APIRule {
		api := simpleRule(ns, name, gw, "app", name+".jwks.example.net")
		api.Spec.Rules = []gatewayv1alpha1.Rule{{Path: "/{**}", Jwt: &gatewayv1alpha1.JwtConfig{
			Authentications: []gatewayv1alpha1.JwtAuthentication{{Issuer: "https://id.example.com", JwksURI: uri}},
		}}}
		return api
	}
	for name, uri := range map[string]string{
		"metadata":    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
		"loopback":    "http://127.0.0.1:15014/debug/configz",
		"private":     "http://10.0.0.12/keys",
		"cgnat":       "http://100.64.1.1/keys",
		"service":     "http://payments.shop.svc.cluster.local/keys",
		"apiserver":   "https://kubernetes.default/api",
		"bare":        "http://istiod:15010/keys",
		"mapped-ipv6": "http://[::ffff:169.254.169.254]/",
	} {
		api := withJWKS(name, uri)
		if err := k8s.Create(ctx, api); err != nil {
			t.Fatal(err)
		}
		st := waitState(t, ctx, api, gatewayv1alpha1.StateError)
		if reasonOf(st) != gatewayv1alpha1.ReasonJWKSNotAllowed || !strings.Contains(st.Description, "rules[0].jwt.authentications[0].jwksUri") ||
			!strings.Contains(st.Description, "--apigateway-jwks-allow-internal") {
			t.Errorf("%s (%s): reason %q, description %q; want JWKSNotAllowed naming the field and the flag", name, uri, reasonOf(st), st.Description)
		}
		ras := &securityv1.RequestAuthenticationList{}
		if err := k8s.List(ctx, ras, client.InNamespace(ns), client.MatchingLabels{apirule.LabelAPIRule: api.Name}); err != nil {
			t.Fatal(err)
		}
		if len(ras.Items) != 0 || len(virtualServicesOf(t, api)) != 0 {
			t.Errorf("%s: Istio objects written for a refused APIRule (%d RequestAuthentications)", name, len(ras.Items))
		}
	}
	for name, uri := range map[string]string{
		"public":  "https://auth.example.com/.well-known/jwks.json",
		"allowed": "http://" + allowedJWKSHost + ":8080/realms/shop/protocol/openid-connect/certs",
	} {
		api := withJWKS(name, uri)
		if err := k8s.Create(ctx, api); err != nil {
			t.Fatal(err)
		}
		waitState(t, ctx, api, gatewayv1alpha1.StateReady)
	}
}
