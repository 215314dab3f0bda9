package apirule

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
)

func jwtFrom(issuer, jwks string) *gatewayv1alpha1.JwtConfig {
	return &gatewayv1alpha1.JwtConfig{Authentications: []gatewayv1alpha1.JwtAuthentication{{Issuer: issuer, JwksURI: jwks}}}
}

func rule(path string, methods ...gatewayv1alpha1.HTTPMethod) gatewayv1alpha1.Rule {
	return gatewayv1alpha1.Rule{Path: path, Methods: methods, NoAuth: ptr.To(true)}
}

func apiWith(rules ...gatewayv1alpha1.Rule) *gatewayv1alpha1.APIRule {
	api := &gatewayv1alpha1.APIRule{}
	api.Namespace, api.Name = "shop", "orders"
	api.Spec.Hosts = []gatewayv1alpha1.Host{"orders.example.com"}
	api.Spec.Gateway = "istio-system/gw"
	api.Spec.Service = &gatewayv1alpha1.Service{Name: "orders", Port: 80}
	api.Spec.Rules = rules
	return api
}

func TestValidateSpec(t *testing.T) {
	jwtRule := func(path string) gatewayv1alpha1.Rule {
		return gatewayv1alpha1.Rule{Path: path, Jwt: jwtFrom("https://a.example.com", "https://a.example.com/keys")}
	}
	header := func(r gatewayv1alpha1.Rule, m gatewayv1alpha1.StringMatch) gatewayv1alpha1.Rule {
		r.Match = &gatewayv1alpha1.Match{Headers: []gatewayv1alpha1.HeaderMatch{{Name: "x-client", StringMatch: m}}}
		return r
	}
	otherIssuer := jwtRule("/b")
	otherIssuer.Jwt = jwtFrom("https://a.example.com", "https://elsewhere.example.com/keys")
	for _, tc := range []struct {
		name   string
		api    *gatewayv1alpha1.APIRule
		reason string // "" when valid
		says   string
	}{
		{"plain", apiWith(rule("/a"), rule("/{**}")), "", ""},
		{"catch-all first hides the rest", apiWith(rule("/{**}"), rule("/orders", "GET")), gatewayv1alpha1.ReasonInvalid, "rules[1] (path /orders, method GET) is never used"},
		{"slash-star first hides the rest", apiWith(rule("/*", "GET"), rule("/orders", "GET", "POST")), gatewayv1alpha1.ReasonInvalid, "never used"},
		{"segment wildcard hides a literal", apiWith(rule("/orders/{*}"), rule("/orders/42")), gatewayv1alpha1.ReasonInvalid, "never used"},
		{"different methods do not hide", apiWith(rule("/orders/{*}", "GET"), rule("/orders/42", "POST")), "", ""},
		{"literal before wildcard is fine", apiWith(rule("/orders/42"), rule("/orders/{*}")), "", ""},
		{"header-matched rule hides nothing", apiWith(header(rule("/{**}"), gatewayv1alpha1.StringMatch{Exact: ptr.To("mobile")}), rule("/orders")), "", ""},
		{"{** } in the middle", apiWith(rule("/a/{**}/b")), gatewayv1alpha1.ReasonInvalid, "last segment"},
		{"partial template", apiWith(rule("/a{*}")), gatewayv1alpha1.ReasonInvalid, "segment"},
		{"issuer configured twice", apiWith(jwtRule("/a"), otherIssuer), gatewayv1alpha1.ReasonInvalid, "configure issuer"},
		{"regex header opening a stricter path", apiWith(header(rule("/{**}"), gatewayv1alpha1.StringMatch{Regex: ptr.To("mob.*")}), jwtRule("/orders")), gatewayv1alpha1.ReasonInvalid, "authorization policy cannot check"},
		{"star-edged exact header opening a stricter path", apiWith(header(rule("/orders"), gatewayv1alpha1.StringMatch{Exact: ptr.To("*")}), jwtRule("/orders")), gatewayv1alpha1.ReasonInvalid, "cannot check"},
		{"regex header on a separate path", apiWith(header(rule("/beta/{**}"), gatewayv1alpha1.StringMatch{Regex: ptr.To("on|yes")}), jwtRule("/orders")), "", ""},
		{"exact header before a stricter rule", apiWith(header(rule("/orders"), gatewayv1alpha1.StringMatch{Exact: ptr.To("mobile")}), jwtRule("/orders")), "", ""},
		{"bad header regex", apiWith(header(rule("/a"), gatewayv1alpha1.StringMatch{Regex: ptr.To("(")})), gatewayv1alpha1.ReasonInvalid, "not a valid RE2"},
		{"huge header regex", apiWith(header(rule("/a"), gatewayv1alpha1.StringMatch{Regex: ptr.To("((a{100}){100}){100}")})), gatewayv1alpha1.ReasonInvalid, ""},
		{"path past the schema's length", apiWith(rule("/" + strings.Repeat("t", 1024))), gatewayv1alpha1.ReasonInvalid, "longer than 1024"},
		{"path of 256 wildcard segments", apiWith(rule(strings.Repeat("/{*}", 256))), gatewayv1alpha1.ReasonInvalid, "use fewer {*} segments"},
		{"path of 1,024 characters", apiWith(rule("/" + strings.Repeat("t", 1023))), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ValidateSpec(tc.api)
			switch {
			case tc.reason == "" && p != nil:
				t.Fatalf("refused: %v", p)
			case tc.reason != "" && p == nil:
				t.Fatal("accepted")
			case p != nil && (p.Reason != tc.reason || !strings.Contains(p.Message, tc.says)):
				t.Fatalf("got %v; want reason %s saying %q", p, tc.reason, tc.says)
			}
		})
	}
}

func TestValidateSpecCrossNamespace(t *testing.T) {
	api := apiWith(rule("/a"))
	api.Spec.Service.Namespace = ptr.To("shop")
	if p := ValidateSpec(api); p != nil {
		t.Fatalf("own namespace refused: %v", p)
	}
	api.Spec.Service.Namespace = ptr.To("payments")
	if p := ValidateSpec(api); p == nil || p.Reason != gatewayv1alpha1.ReasonCrossNamespaceService {
		t.Fatalf("got %v, want CrossNamespaceService", p)
	}
}

func TestPathRegex(t *testing.T) {
	for path, want := range map[string]string{
		"/v1.0/status": `^/v1\.0/status$`,
		"/a/{*}/b":     "^/a/" + oneSegment + "/b$",
		"/files/{**}":  "^/files/" + anySegments + "$",
		"/x+(y)":       `^/x\+\(y\)$`,
	} {
		if got := PathRegex(path); got != want {
			t.Errorf("PathRegex(%q) = %q, want %q", path, got, want)
		}
		if err := CheckRegex(PathRegex(path)); err != nil {
			t.Errorf("PathRegex(%q) does not compile: %v", path, err)
		}
	}
}

// FuzzValidateSpec: no path or header expression makes validation or
// generation panic, and every accepted path yields a regex that compiles.
func FuzzValidateSpec(f *testing.F) {
	f.Add("/orders/{*}", "/{**}", "mob.*", "GET")
	f.Add("/*", "/a/{**}", "(", "POST")
	f.Add("/a{*}", "/a/{*}/{**}", "((a{100}){100}){100}", "")
	f.Fuzz(func(t *testing.T, p1, p2, re, method string) {
		r1 := rule(p1, gatewayv1alpha1.HTTPMethod(method))
		if method == "" {
			r1.Methods = nil
		}
		r2 := gatewayv1alpha1.Rule{Path: p2, Jwt: jwtFrom("https://a.example.com", "https://a.example.com/keys")}
		r1.Match = &gatewayv1alpha1.Match{Headers: []gatewayv1alpha1.HeaderMatch{{Name: "x", StringMatch: gatewayv1alpha1.StringMatch{Regex: &re}}}}
		api := apiWith(r1, r2)
		if ValidateSpec(api) != nil {
			return
		}
		objs, err := Generate(api, Facts{Hosts: []string{"orders.example.com"}, Selectors: map[string]map[string]string{"orders": {"app": "orders"}}})
		if err != nil {
			t.Fatalf("valid APIRule not generated: %v", err)
		}
		for _, h := range objs.VirtualService.Spec.Http {
			if u := h.Match[0].GetUri().GetRegex(); u != "" {
				if err := CheckRegex(u); err != nil {
					t.Fatalf("path %q: generated regex %q: %v", p1, u, err)
				}
			}
		}
	})
}
