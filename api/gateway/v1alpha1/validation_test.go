// Tests of the gateway.portal.io CRDs against a real API server: the schema
// and CEL rules on the types accept the valid objects and the examples, and
// refuse each invalid one with a message that says what to fix.
package v1alpha1_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gw "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

const ns = "gateway-validation"

var shared devtest.Shared

func TestMain(m *testing.M) { shared.Main(m) }

// apiClient returns a client of the shared control plane with the
// validation namespace created.
func apiClient(t *testing.T) client.Client {
	t.Helper()
	cl := shared.Cluster(t)
	s := runtime.NewScheme()
	if err := errors.Join(corev1.AddToScheme(s), gw.AddToScheme(s)); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cl.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return c
}

type validationCase struct {
	name string
	obj  client.Object
	// want is a substring of the API server's error; empty for a valid object.
	want string
}

// check creates each object and compares the outcome with the case. The
// invalid ones must fail as Invalid (422) with the expected message.
func check(t *testing.T, c client.Client, cases []validationCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(context.Background(), tc.obj)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid object refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("API server accepted it; want an error with %q", tc.want)
			case !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %v; want Invalid with %q", err, tc.want)
			}
		})
	}
}

func service() *gw.Service { return &gw.Service{Name: "orders", Port: 8080} }

func noAuth(path string) gw.Rule { return gw.Rule{Path: path, NoAuth: ptr.To(true)} }

func jwt() *gw.JwtConfig {
	return &gw.JwtConfig{Authentications: []gw.JwtAuthentication{{Issuer: "https://auth.example.com", JwksURI: "https://auth.example.com/jwks"}}}
}

// apiRule returns a valid APIRule that edit then changes.
func apiRule(name string, edit func(*gw.APIRuleSpec)) *gw.APIRule {
	r := &gw.APIRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gw.APIRuleSpec{
			Hosts:   []gw.Host{"orders.example.com"},
			Gateway: "portal-system/portal-gateway",
			Service: service(),
			Rules:   []gw.Rule{noAuth("/orders")},
		},
	}
	if edit != nil {
		edit(&r.Spec)
	}
	return r
}

func TestAPIRuleValidation(t *testing.T) {
	c := apiClient(t)
	check(t, c, []validationCase{
		{"minimal", apiRule("minimal", nil), ""},
		{"several hosts and wildcards", apiRule("hosts", func(s *gw.APIRuleSpec) {
			s.Hosts = []gw.Host{"a.example.com", "*.example.org", "short"}
			s.Timeout = ptr.To(gw.Timeout(3900))
			s.Rules = []gw.Rule{
				noAuth("/a/{*}/b"), noAuth("/b/{**}"), noAuth("/*"), noAuth("/{**}"),
				{Path: "/j", Methods: []gw.HTTPMethod{"GET", "PATCH"}, Jwt: jwt(), Timeout: ptr.To(gw.Timeout(1))},
				{Path: "/e", NoAuth: ptr.To(false), ExtAuth: &gw.ExtAuth{Authorizers: []string{"oauth2-proxy"}, Restrictions: jwt()}},
				{Path: "/h", NoAuth: ptr.To(true), Match: &gw.Match{Headers: []gw.HeaderMatch{
					{Name: "x-a", StringMatch: gw.StringMatch{Exact: ptr.To("1")}},
					{Name: "x-b", StringMatch: gw.StringMatch{Prefix: ptr.To("p")}},
					{Name: "x-c", StringMatch: gw.StringMatch{Regex: ptr.To("v[0-9]+")}},
				}}},
			}
		}), ""},
		{"same path told apart by methods or headers", apiRule("same-path", func(s *gw.APIRuleSpec) {
			mobile := &gw.Match{Headers: []gw.HeaderMatch{{Name: "x-client", StringMatch: gw.StringMatch{Exact: ptr.To("mobile")}}}}
			s.Rules = []gw.Rule{
				{Path: "/orders", Methods: []gw.HTTPMethod{"GET"}, NoAuth: ptr.To(true)},
				{Path: "/orders", Methods: []gw.HTTPMethod{"POST"}, Jwt: jwt()},
				{Path: "/orders", Methods: []gw.HTTPMethod{"POST"}, Match: mobile, Jwt: jwt()},
				{Path: "/orders/{*}", NoAuth: ptr.To(true), Request: &gw.Request{
					Headers: map[string]string{"X-Forwarded-App": "orders"}, Cookies: map[string]string{"session_v2": "x"}}},
			}
		}), ""},
		{"service on every rule", apiRule("rule-services", func(s *gw.APIRuleSpec) {
			s.Service = nil
			s.Rules[0].Service = &gw.Service{Name: "orders", Namespace: ptr.To("shop"), Port: 80}
		}), ""},

		{"no hosts", apiRule("no-hosts", func(s *gw.APIRuleSpec) { s.Hosts = nil }), "spec.hosts"},
		{"duplicate host", apiRule("dup-host", func(s *gw.APIRuleSpec) { s.Hosts = []gw.Host{"a.example.com", "a.example.com"} }), "Duplicate value"},
		{"bad host", apiRule("bad-host", func(s *gw.APIRuleSpec) { s.Hosts = []gw.Host{"https://a.example.com"} }), "spec.hosts[0]"},
		{"gateway without namespace", apiRule("bad-gateway", func(s *gw.APIRuleSpec) { s.Gateway = "portal-gateway" }), "spec.gateway"},
		{"no rules", apiRule("no-rules", func(s *gw.APIRuleSpec) { s.Rules = nil }), "spec.rules"},
		{"no service anywhere", apiRule("no-service", func(s *gw.APIRuleSpec) { s.Service = nil }), "set spec.service, or a service on every rule"},
		{"timeout above 3900", apiRule("long-timeout", func(s *gw.APIRuleSpec) { s.Timeout = ptr.To(gw.Timeout(3901)) }), "spec.timeout"},
		{"rule timeout zero", apiRule("zero-timeout", func(s *gw.APIRuleSpec) { s.Rules[0].Timeout = ptr.To(gw.Timeout(0)) }), "spec.rules[0].timeout"},
		{"service port zero", apiRule("port-zero", func(s *gw.APIRuleSpec) { s.Service.Port = 0 }), "spec.service.port"},
		{"no access strategy", apiRule("no-auth", func(s *gw.APIRuleSpec) { s.Rules[0].NoAuth = nil }), "set exactly one of noAuth: true, jwt or extAuth"},
		{"noAuth false alone", apiRule("noauth-false", func(s *gw.APIRuleSpec) { s.Rules[0].NoAuth = ptr.To(false) }), "set exactly one of noAuth: true, jwt or extAuth"},
		{"noAuth and jwt", apiRule("noauth-jwt", func(s *gw.APIRuleSpec) { s.Rules[0].Jwt = jwt() }), "set exactly one of noAuth: true, jwt or extAuth"},
		{"jwt and extAuth", apiRule("jwt-extauth", func(s *gw.APIRuleSpec) {
			s.Rules[0] = gw.Rule{Path: "/x", Jwt: jwt(), ExtAuth: &gw.ExtAuth{Authorizers: []string{"a"}}}
		}), "set exactly one of noAuth: true, jwt or extAuth"},
		{"{**} not last", apiRule("dstar-middle", func(s *gw.APIRuleSpec) { s.Rules[0].Path = "/a/{**}/b" }), "{**} may appear once, as the last segment of the path"},
		{"{**} twice", apiRule("dstar-twice", func(s *gw.APIRuleSpec) { s.Rules[0].Path = "/{**}/{**}" }), "{**} may appear once, as the last segment of the path"},
		{"wildcard inside a segment", apiRule("star-in-segment", func(s *gw.APIRuleSpec) { s.Rules[0].Path = "/a{*}" }), "spec.rules[0].path"},
		{"relative path", apiRule("relative", func(s *gw.APIRuleSpec) { s.Rules[0].Path = "orders" }), "spec.rules[0].path"},
		{"unknown method", apiRule("bad-method", func(s *gw.APIRuleSpec) { s.Rules[0].Methods = []gw.HTTPMethod{"FETCH"} }), `Unsupported value: "FETCH"`},
		{"duplicate method", apiRule("dup-method", func(s *gw.APIRuleSpec) { s.Rules[0].Methods = []gw.HTTPMethod{"GET", "GET"} }), "Duplicate value"},
		{"jwt without authentications", apiRule("jwt-empty", func(s *gw.APIRuleSpec) {
			s.Rules[0] = gw.Rule{Path: "/x", Jwt: &gw.JwtConfig{}}
		}), "spec.rules[0].jwt.authentications"},
		{"jwksUri not a URL", apiRule("jwks", func(s *gw.APIRuleSpec) {
			j := jwt()
			j.Authentications[0].JwksURI = "file:///etc/keys"
			s.Rules[0] = gw.Rule{Path: "/x", Jwt: j}
		}), "jwksUri must be an http or https URL"},
		{"empty authorization", apiRule("authz-empty", func(s *gw.APIRuleSpec) {
			j := jwt()
			j.Authorizations = []gw.JwtAuthorization{{}}
			s.Rules[0] = gw.Rule{Path: "/x", Jwt: j}
		}), "an authorization needs requiredScopes or audiences"},
		{"extAuth without authorizers", apiRule("extauth-empty", func(s *gw.APIRuleSpec) {
			s.Rules[0] = gw.Rule{Path: "/x", ExtAuth: &gw.ExtAuth{}}
		}), "spec.rules[0].extAuth.authorizers"},
		{"header match with two kinds", apiRule("header-two", func(s *gw.APIRuleSpec) {
			s.Rules[0].Match = &gw.Match{Headers: []gw.HeaderMatch{{Name: "x", StringMatch: gw.StringMatch{Exact: ptr.To("a"), Regex: ptr.To("b")}}}}
		}), "set exactly one of exact, prefix or regex"},
		{"header match with none", apiRule("header-none", func(s *gw.APIRuleSpec) {
			s.Rules[0].Match = &gw.Match{Headers: []gw.HeaderMatch{{Name: "x"}}}
		}), "set exactly one of exact, prefix or regex"},
		{"header name with a space", apiRule("header-name", func(s *gw.APIRuleSpec) {
			s.Rules[0].Match = &gw.Match{Headers: []gw.HeaderMatch{{Name: "x y", StringMatch: gw.StringMatch{Exact: ptr.To("a")}}}}
		}), "spec.rules[0].match.headers[0].name"},
		{"same header twice", apiRule("header-dup", func(s *gw.APIRuleSpec) {
			m := gw.StringMatch{Exact: ptr.To("a")}
			s.Rules[0].Match = &gw.Match{Headers: []gw.HeaderMatch{{Name: "x", StringMatch: m}, {Name: "x", StringMatch: m}}}
		}), "Duplicate value"},
		{"request header name with a colon", apiRule("req-header", func(s *gw.APIRuleSpec) {
			s.Rules[0].Request = &gw.Request{Headers: map[string]string{"x-a:b": "1"}}
		}), "a header name is 1 to 256 of the characters"},
		{"request cookie name with a space", apiRule("req-cookie", func(s *gw.APIRuleSpec) {
			s.Rules[0].Request = &gw.Request{Cookies: map[string]string{"a b": "1"}}
		}), "a cookie name is 1 to 256 of the characters"},
		{"same path and method twice", apiRule("conflict-method", func(s *gw.APIRuleSpec) {
			s.Rules = []gw.Rule{
				{Path: "/orders", Methods: []gw.HTTPMethod{"GET", "POST"}, NoAuth: ptr.To(true)},
				{Path: "/orders", Methods: []gw.HTTPMethod{"POST"}, Jwt: jwt()},
			}
		}), "two rules have the same path, a method in common and the same header match"},
		{"same path, one rule for every method", apiRule("conflict-all", func(s *gw.APIRuleSpec) {
			s.Rules = []gw.Rule{noAuth("/orders"), {Path: "/orders", Methods: []gw.HTTPMethod{"DELETE"}, Jwt: jwt()}}
		}), "two rules have the same path, a method in common and the same header match"},
		{"cors origin with two kinds", apiRule("cors-origin", func(s *gw.APIRuleSpec) {
			s.CorsPolicy = &gw.CorsPolicy{AllowOrigins: []gw.StringMatch{{Exact: ptr.To("https://a"), Prefix: ptr.To("https://")}}}
		}), "set exactly one of exact, prefix or regex"},
		{"cors unknown method", apiRule("cors-method", func(s *gw.APIRuleSpec) {
			s.CorsPolicy = &gw.CorsPolicy{AllowMethods: []gw.HTTPMethod{"get"}}
		}), `Unsupported value: "get"`},
	})
}

func rateLimit(name string, edit func(*gw.RateLimitSpec)) *gw.RateLimit {
	r := &gw.RateLimit{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gw.RateLimitSpec{
			SelectorLabels: map[string]string{"app": "orders"},
			Local:          gw.LocalConfig{DefaultBucket: bucket("1m")},
		},
	}
	if edit != nil {
		edit(&r.Spec)
	}
	return r
}

func bucket(fill string) gw.BucketSpec {
	d, _ := time.ParseDuration(fill)
	return gw.BucketSpec{MaxTokens: 10, TokensPerFill: 5, FillInterval: metav1.Duration{Duration: d}}
}

func TestRateLimitValidation(t *testing.T) {
	c := apiClient(t)
	check(t, c, []validationCase{
		{"default bucket only", rateLimit("default-only", nil), ""},
		{"shadow mode", rateLimit("shadow", func(s *gw.RateLimitSpec) { s.Enforce = ptr.To(false) }), ""},
		{"buckets by path and headers", rateLimit("buckets", func(s *gw.RateLimitSpec) {
			s.EnableResponseHeaders = true
			s.Local.Buckets = []gw.BucketConfig{
				{Path: "/a", Bucket: bucket("50ms")},
				{Headers: map[string]string{"x-client": "mobile"}, Bucket: bucket("1h")},
			}
		}), ""},

		{"no selector", rateLimit("no-selector", func(s *gw.RateLimitSpec) { s.SelectorLabels = nil }), "spec.selectorLabels"},
		{"no tokens", rateLimit("no-tokens", func(s *gw.RateLimitSpec) { s.Local.DefaultBucket.MaxTokens = 0 }), "spec.local.defaultBucket.maxTokens"},
		{"no refill", rateLimit("no-refill", func(s *gw.RateLimitSpec) { s.Local.DefaultBucket.TokensPerFill = 0 }), "spec.local.defaultBucket.tokensPerFill"},
		{"fill interval zero", rateLimit("fill-zero", func(s *gw.RateLimitSpec) { s.Local.DefaultBucket = bucket("0s") }), "fillInterval must be at least 50ms"},
		{"fill interval too short", rateLimit("fill-short", func(s *gw.RateLimitSpec) { s.Local.DefaultBucket = bucket("10ms") }), "fillInterval must be at least 50ms"},
		{"bucket selects nothing", rateLimit("bucket-empty", func(s *gw.RateLimitSpec) {
			s.Local.Buckets = []gw.BucketConfig{{Bucket: bucket("1s")}}
		}), "a bucket needs a path or headers to select its requests"},
		{"bucket relative path", rateLimit("bucket-path", func(s *gw.RateLimitSpec) {
			s.Local.Buckets = []gw.BucketConfig{{Path: "a", Bucket: bucket("1s")}}
		}), "spec.local.buckets[0].path"},
	})

	// A fill interval that is not a duration is refused by the pattern
	// before the CEL rule runs (typed objects cannot carry one).
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gw.GroupVersion.String(), "kind": "RateLimit",
		"metadata": map[string]any{"namespace": ns, "name": "fill-words"},
		"spec": map[string]any{
			"selectorLabels": map[string]any{"app": "x"},
			"local":          map[string]any{"defaultBucket": map[string]any{"maxTokens": 1, "tokensPerFill": 1, "fillInterval": "soon"}},
		},
	}}
	check(t, c, []validationCase{{"fill interval not a duration", u, "spec.local.defaultBucket.fillInterval"}})

	// enforce defaults to true: a RateLimit enforces unless it says shadow.
	var got gw.RateLimit
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "default-only"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Enforce == nil || !*got.Spec.Enforce {
		t.Errorf("spec.enforce defaulted to %v; want true", got.Spec.Enforce)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "shadow"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Enforce == nil || *got.Spec.Enforce {
		t.Errorf("shadow mode: spec.enforce %v; want false", got.Spec.Enforce)
	}
}

func apiGateway(name string, edit func(*gw.DefaultGateway)) *gw.APIGateway {
	g := &gw.APIGateway{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       gw.APIGatewaySpec{Gateway: gw.DefaultGateway{Hosts: []gw.Host{"*.example.com"}}},
	}
	if edit != nil {
		edit(&g.Spec.Gateway)
	}
	return g
}

func TestAPIGatewayValidation(t *testing.T) {
	c := apiClient(t)
	check(t, c, []validationCase{
		{"defaults", apiGateway("defaults", nil), ""},
		{"https with redirect", apiGateway("https", func(g *gw.DefaultGateway) {
			g.CredentialName, g.HTTPSRedirect = ptr.To("example-tls"), true
		}), ""},

		{"no hosts", apiGateway("no-hosts", func(g *gw.DefaultGateway) { g.Hosts = nil }), "spec.gateway.hosts"},
		{"duplicate host", apiGateway("dup-host", func(g *gw.DefaultGateway) { g.Hosts = []gw.Host{"a.b", "a.b"} }), "Duplicate value"},
		{"redirect without certificate", apiGateway("redirect", func(g *gw.DefaultGateway) { g.HTTPSRedirect = true }),
			"httpsRedirect needs credentialName"},
		{"bad name", apiGateway("bad-name", func(g *gw.DefaultGateway) { g.Name = "Portal_Gateway" }), "spec.gateway.name"},
	})
	var got gw.APIGateway
	if err := c.Get(context.Background(), client.ObjectKey{Name: "defaults"}, &got); err != nil {
		t.Fatal(err)
	}
	if g := got.Spec.Gateway; g.Name != "portal-gateway" || g.Namespace != "portal-system" || g.Selector["istio"] != "ingressgateway" {
		t.Errorf("defaults: %+v", g)
	}
}

// TestExamples creates every example of examples/apirules.
func TestExamples(t *testing.T) {
	c := apiClient(t)
	files, err := filepath.Glob("../../../examples/apirules/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	kinds := map[string]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj unstructured.Unstructured
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if obj.GetKind() != "APIGateway" {
				obj.SetNamespace(ns)
			}
			if err := c.Create(context.Background(), &obj); err != nil {
				t.Errorf("%s: %s %s: %v", f, obj.GetKind(), obj.GetName(), err)
			}
			kinds[obj.GetKind()]++
		}
	}
	if kinds["APIRule"] == 0 || kinds["RateLimit"] == 0 {
		t.Errorf("examples hold %v; want APIRules and a RateLimit", kinds)
	}
}

// TestLargestAPIRule creates an APIRule at every size limit at once: the
// CEL rules over all rules (service, duplicate path and method) must stay
// within the API server's cost budget for the largest object the schema
// lets through, or a legitimate APIRule would be refused for its size.
func TestLargestAPIRule(t *testing.T) {
	c := apiClient(t)
	all := []gw.HTTPMethod{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
	r := apiRule("largest", func(s *gw.APIRuleSpec) {
		s.Hosts = nil
		for i := range 32 {
			s.Hosts = append(s.Hosts, gw.Host(fmt.Sprintf("h%d.example.com", i)))
		}
		s.Rules = nil
		for i := range 64 {
			m := &gw.Match{}
			for h := range 16 {
				m.Headers = append(m.Headers, gw.HeaderMatch{Name: fmt.Sprintf("x-h%d", h), StringMatch: gw.StringMatch{Exact: ptr.To(strings.Repeat("v", 1024))}})
			}
			// Every rule has the same path and methods, told apart only by
			// the last header's value: the duplicate check compares it all.
			m.Headers[15].Exact = ptr.To(fmt.Sprintf("%d", i))
			s.Rules = append(s.Rules, gw.Rule{Path: "/" + strings.Repeat("p", 1022), Methods: all, Match: m, NoAuth: ptr.To(true), Service: service()})
		}
	})
	if err := c.Create(context.Background(), r); err != nil {
		t.Fatalf("largest APIRule refused: %v", err)
	}
}
