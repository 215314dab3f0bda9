// Package apirule turns an APIRule into the Istio configuration that serves
// it: one VirtualService on the APIRule's gateway, AuthorizationPolicies and
// RequestAuthentications on the target workloads, in the shapes Kyma's API
// Gateway (v2 APIRule) generates, so manifests and habits carry over.
package apirule

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingapi "istio.io/api/networking/v1alpha3"
	securityapi "istio.io/api/security/v1beta1"
	typeapi "istio.io/api/type/v1beta1"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
)

const (
	// LabelAPIRule names the APIRule (of the object's namespace) that an
	// Istio object was generated for.
	LabelAPIRule = "gateway.portal.io/apirule"
	// LabelManagedBy marks every object Portal generates.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "portal"

	// DefaultIngressPrincipal is the identity of Istio's default ingress
	// gateway: the only caller the generated AuthorizationPolicies allow, so
	// a request that skips the gateway (pod to pod) skips no check.
	DefaultIngressPrincipal = "cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account"

	defaultTimeout = 180 * time.Second
	audienceKey    = "request.auth.claims[aud]"
)

// Envoy's URI template segments, as regular expressions for the
// VirtualService (the AuthorizationPolicy takes the templates as they are).
const (
	anySegments = `([A-Za-z0-9-._~!$&'()*+,;=:@/]|%[0-9a-fA-F]{2})*`
	oneSegment  = `([A-Za-z0-9-._~!$&'()*+,;=:@]|%[0-9a-fA-F]{2})+`
)

// scopeKeys are the claims a required scope may come in; a token carries
// its scopes in one of them, so each gets its own AuthorizationPolicy rule.
var scopeKeys = []string{"request.auth.claims[scp]", "request.auth.claims[scope]", "request.auth.claims[scopes]"}

// corsResponseHeaders are removed from the service's responses so the only
// CORS answer is the APIRule's.
var corsResponseHeaders = []string{
	"Access-Control-Allow-Origin", "Access-Control-Expose-Headers", "Access-Control-Allow-Headers",
	"Access-Control-Allow-Credentials", "Access-Control-Allow-Methods", "Access-Control-Max-Age",
}

// Facts are what the generator needs from the cluster.
type Facts struct {
	// Hosts are the APIRule's hosts as fully qualified names, in order.
	Hosts []string
	// Selectors are the pod selectors of the target Services, by name.
	Selectors map[string]map[string]string
	// IngressPrincipal is the ingress gateway's SPIFFE identity;
	// DefaultIngressPrincipal when empty.
	IngressPrincipal string
}

// Objects are the Istio objects an APIRule becomes, in the APIRule's
// namespace, without owner references (the caller sets them).
type Objects struct {
	VirtualService         *networkingv1.VirtualService
	AuthorizationPolicies  []*securityv1.AuthorizationPolicy
	RequestAuthentications []*securityv1.RequestAuthentication
}

// Generate builds the Istio objects of api. It expects an APIRule that
// passed Validate with the same facts.
func Generate(api *gatewayv1alpha1.APIRule, f Facts) (*Objects, error) {
	if len(f.Hosts) == 0 {
		return nil, fmt.Errorf("apirule %s/%s: no hosts", api.Namespace, api.Name)
	}
	if f.IngressPrincipal == "" {
		f.IngressPrincipal = DefaultIngressPrincipal
	}
	vs, err := virtualService(api, f)
	if err != nil {
		return nil, err
	}
	out := &Objects{VirtualService: vs}
	seenRA := map[string]bool{}
	for i := range api.Spec.Rules {
		r := &api.Spec.Rules[i]
		svc := serviceOf(api, r)
		sel, ok := f.Selectors[svc.Name]
		if !ok || len(sel) == 0 {
			return nil, fmt.Errorf("rule %d: no pod selector for Service %q", i, svc.Name)
		}
		out.AuthorizationPolicies = append(out.AuthorizationPolicies, authorizationPolicies(api, i, sel, f)...)
		if ra := requestAuthentication(api, i, sel); ra != nil {
			// Rules with the same issuers on the same workload need one.
			key := raKey(sel, ra.Spec.JwtRules)
			if !seenRA[key] {
				seenRA[key] = true
				out.RequestAuthentications = append(out.RequestAuthentications, ra)
			}
		}
	}
	return out, nil
}

// serviceOf is the Service a rule forwards to.
func serviceOf(api *gatewayv1alpha1.APIRule, r *gatewayv1alpha1.Rule) *gatewayv1alpha1.Service {
	if r.Service != nil {
		return r.Service
	}
	return api.Spec.Service
}

// objectMeta names a generated object: the APIRule's name and a hash of
// what the object is for, so names are stable across reconciles and never
// collide between two APIRules of a namespace.
func objectMeta(api *gatewayv1alpha1.APIRule, what string) metav1.ObjectMeta {
	sum := sha256.Sum256([]byte(api.Name + "/" + what))
	base := api.Name
	if len(base) > 52 {
		base = strings.TrimRight(base[:52], "-.")
	}
	return metav1.ObjectMeta{
		Name:      base + "-" + hex.EncodeToString(sum[:])[:10],
		Namespace: api.Namespace,
		Labels:    map[string]string{LabelAPIRule: api.Name, LabelManagedBy: managedBy},
	}
}

func virtualService(api *gatewayv1alpha1.APIRule, f Facts) (*networkingv1.VirtualService, error) {
	vs := &networkingv1.VirtualService{ObjectMeta: objectMeta(api, "virtualservice")}
	vs.APIVersion, vs.Kind = networkingv1.SchemeGroupVersion.String(), "VirtualService"
	vs.Spec.Hosts = slices.Clone(f.Hosts)
	vs.Spec.Gateways = []string{api.Spec.Gateway}
	forwardedHost := f.Hosts[0]
	if strings.HasPrefix(forwardedHost, "*.") {
		forwardedHost = "%REQ(:AUTHORITY)%"
	}
	for i := range api.Spec.Rules {
		r := &api.Spec.Rules[i]
		svc := serviceOf(api, r)
		match, err := httpMatch(r)
		if err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		route := &networkingapi.HTTPRoute{
			Match: []*networkingapi.HTTPMatchRequest{match},
			Route: []*networkingapi.HTTPRouteDestination{{Destination: &networkingapi.Destination{
				Host: fmt.Sprintf("%s.%s.svc.cluster.local", svc.Name, api.Namespace),
				Port: &networkingapi.PortSelector{Number: svc.Port},
			}}},
			Timeout: durationpb.New(timeoutOf(api, r)),
			Headers: &networkingapi.Headers{
				Request:  &networkingapi.Headers_HeaderOperations{Set: map[string]string{"x-forwarded-host": forwardedHost}},
				Response: &networkingapi.Headers_HeaderOperations{Remove: slices.Clone(corsResponseHeaders)},
			},
		}
		if rq := r.Request; rq != nil {
			maps.Copy(route.Headers.Request.Set, rq.Headers)
			if len(rq.Cookies) > 0 {
				cookies := make([]string, 0, len(rq.Cookies))
				for _, k := range slices.Sorted(maps.Keys(rq.Cookies)) {
					cookies = append(cookies, k+"="+rq.Cookies[k])
				}
				route.Headers.Request.Set["Cookie"] = strings.Join(cookies, "; ")
			}
		}
		if c := api.Spec.CorsPolicy; c != nil {
			route.CorsPolicy = corsPolicy(c)
		}
		vs.Spec.Http = append(vs.Spec.Http, route)
	}
	return vs, nil
}

func timeoutOf(api *gatewayv1alpha1.APIRule, r *gatewayv1alpha1.Rule) time.Duration {
	switch {
	case r.Timeout != nil:
		return time.Duration(*r.Timeout) * time.Second
	case api.Spec.Timeout != nil:
		return time.Duration(*api.Spec.Timeout) * time.Second
	}
	return defaultTimeout
}

func httpMatch(r *gatewayv1alpha1.Rule) (*networkingapi.HTTPMatchRequest, error) {
	m := &networkingapi.HTTPMatchRequest{}
	if matchesAllPaths(r.Path) {
		m.Uri = &networkingapi.StringMatch{MatchType: &networkingapi.StringMatch_Prefix{Prefix: "/"}}
	} else {
		m.Uri = &networkingapi.StringMatch{MatchType: &networkingapi.StringMatch_Regex{Regex: PathRegex(r.Path)}}
	}
	if len(r.Methods) > 0 {
		ms := make([]string, len(r.Methods))
		for i, x := range r.Methods {
			ms[i] = string(x)
		}
		m.Method = &networkingapi.StringMatch{MatchType: &networkingapi.StringMatch_Regex{Regex: "^(" + strings.Join(ms, "|") + ")$"}}
	}
	if r.Match != nil && len(r.Match.Headers) > 0 {
		m.Headers = map[string]*networkingapi.StringMatch{}
		for _, h := range r.Match.Headers {
			sm, err := stringMatch(h.StringMatch)
			if err != nil {
				return nil, fmt.Errorf("header %q: %w", h.Name, err)
			}
			// Envoy keeps header names in lower case.
			m.Headers[strings.ToLower(h.Name)] = sm
		}
	}
	return m, nil
}

func stringMatch(s gatewayv1alpha1.StringMatch) (*networkingapi.StringMatch, error) {
	switch {
	case s.Exact != nil:
		return &networkingapi.StringMatch{MatchType: &networkingapi.StringMatch_Exact{Exact: *s.Exact}}, nil
	case s.Prefix != nil:
		return &networkingapi.StringMatch{MatchType: &networkingapi.StringMatch_Prefix{Prefix: *s.Prefix}}, nil
	case s.Regex != nil:
		return &networkingapi.StringMatch{MatchType: &networkingapi.StringMatch_Regex{Regex: *s.Regex}}, nil
	}
	return nil, fmt.Errorf("set one of exact, prefix or regex")
}

func corsPolicy(c *gatewayv1alpha1.CorsPolicy) *networkingapi.CorsPolicy {
	p := &networkingapi.CorsPolicy{
		AllowHeaders:  slices.Clone(c.AllowHeaders),
		ExposeHeaders: slices.Clone(c.ExposeHeaders),
	}
	for _, m := range c.AllowMethods {
		p.AllowMethods = append(p.AllowMethods, string(m))
	}
	for _, o := range c.AllowOrigins {
		if sm, err := stringMatch(o); err == nil {
			p.AllowOrigins = append(p.AllowOrigins, sm)
		}
	}
	if c.AllowCredentials != nil {
		p.AllowCredentials = wrapperspb.Bool(*c.AllowCredentials)
	}
	if c.MaxAge != nil {
		p.MaxAge = durationpb.New(time.Duration(*c.MaxAge) * time.Second)
	}
	return p
}

// matchesAllPaths: `/*` and `/{**}` take every path.
func matchesAllPaths(p string) bool { return p == "/*" || p == "/{**}" }

// PathRegex is the anchored RE2 expression a VirtualService matches a rule
// path with: `{*}` one segment, `{**}` any number, every other character
// literally (a `.` or `+` in a path means itself).
func PathRegex(path string) string {
	var b strings.Builder
	b.WriteString("^")
	for i, seg := range strings.Split(path, "/") {
		if i > 0 {
			b.WriteString("/")
		}
		switch seg {
		case "{*}":
			b.WriteString(oneSegment)
		case "{**}":
			b.WriteString(anySegments)
		default:
			b.WriteString(regexp.QuoteMeta(seg))
		}
	}
	b.WriteString("$")
	return b.String()
}

// policyPath is the rule's path as an AuthorizationPolicy takes it.
func policyPath(p string) string {
	if p == "/*" {
		return "/{**}"
	}
	return p
}

// notPaths are the paths of earlier rules, with a method in common and no
// header match, that a request to this rule's path could also match: the
// VirtualService sends such requests to the earlier rule, so this rule's
// policy must not allow them.
func notPaths(rules []gatewayv1alpha1.Rule, idx int) []string {
	cur := &rules[idx]
	var out []string
	for i := range idx {
		e := &rules[i]
		if matchesAllPaths(e.Path) || e.Path == "/" || e.Path == cur.Path || e.Match != nil {
			continue
		}
		if methodsOverlap(e.Methods, cur.Methods) && !slices.Contains(out, e.Path) {
			out = append(out, e.Path)
		}
	}
	return out
}

func methodsOverlap(a, b []gatewayv1alpha1.HTTPMethod) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, m := range a {
		if slices.Contains(b, m) {
			return true
		}
	}
	return false
}

// headerConditions carry a rule's header match into its policy, so a rule
// told apart by a header does not open its path to requests without it.
// Regex matches have no AuthorizationPolicy form; Validate refuses the
// APIRules where that would let a request through a weaker rule.
func headerConditions(r *gatewayv1alpha1.Rule) []*securityapi.Condition {
	if r.Match == nil {
		return nil
	}
	var out []*securityapi.Condition
	for _, h := range r.Match.Headers {
		key := "request.headers[" + strings.ToLower(h.Name) + "]"
		switch {
		case h.Exact != nil && !strings.HasPrefix(*h.Exact, "*") && !strings.HasSuffix(*h.Exact, "*"):
			out = append(out, &securityapi.Condition{Key: key, Values: []string{*h.Exact}})
		case h.Prefix != nil && !strings.HasPrefix(*h.Prefix, "*"):
			out = append(out, &securityapi.Condition{Key: key, Values: []string{*h.Prefix + "*"}})
		default:
			out = append(out, &securityapi.Condition{Key: key, Values: []string{"*"}})
		}
	}
	return out
}

func authorizationPolicies(api *gatewayv1alpha1.APIRule, idx int, sel map[string]string, f Facts) []*securityv1.AuthorizationPolicy {
	r := &api.Spec.Rules[idx]
	to := &securityapi.Rule_To{Operation: &securityapi.Operation{
		Hosts:    slices.Clone(f.Hosts),
		Paths:    []string{policyPath(r.Path)},
		NotPaths: notPaths(api.Spec.Rules, idx),
	}}
	for _, m := range r.Methods {
		to.Operation.Methods = append(to.Operation.Methods, string(m))
	}
	when := headerConditions(r)
	newAP := func(what string, action securityapi.AuthorizationPolicy_Action, provider string, rules []*securityapi.Rule) *securityv1.AuthorizationPolicy {
		ap := &securityv1.AuthorizationPolicy{ObjectMeta: objectMeta(api, fmt.Sprintf("rule-%d/%s", idx, what))}
		ap.APIVersion, ap.Kind = securityv1.SchemeGroupVersion.String(), "AuthorizationPolicy"
		ap.Spec.Selector = &typeapi.WorkloadSelector{MatchLabels: maps.Clone(sel)}
		ap.Spec.Action = action
		if provider != "" {
			ap.Spec.ActionDetail = &securityapi.AuthorizationPolicy_Provider{Provider: &securityapi.AuthorizationPolicy_ExtensionProvider{Name: provider}}
		}
		ap.Spec.Rules = rules
		return ap
	}
	var out []*securityv1.AuthorizationPolicy
	var jwt *gatewayv1alpha1.JwtConfig
	switch {
	case r.Jwt != nil:
		jwt = r.Jwt
	case r.ExtAuth != nil:
		for _, name := range r.ExtAuth.Authorizers {
			out = append(out, newAP("extauth/"+name, securityapi.AuthorizationPolicy_CUSTOM, name,
				[]*securityapi.Rule{{To: []*securityapi.Rule_To{to}, When: when}}))
		}
		jwt = r.ExtAuth.Restrictions
	}
	from := &securityapi.Source{Principals: []string{f.IngressPrincipal}}
	if jwt != nil {
		for _, a := range jwt.Authentications {
			from.RequestPrincipals = append(from.RequestPrincipals, a.Issuer+"/*")
		}
	}
	base := func(extra ...*securityapi.Condition) *securityapi.Rule {
		return &securityapi.Rule{
			From: []*securityapi.Rule_From{{Source: from}},
			To:   []*securityapi.Rule_To{to},
			When: append(slices.Clone(when), extra...),
		}
	}
	if jwt == nil || len(jwt.Authorizations) == 0 {
		return append(out, newAP("allow", securityapi.AuthorizationPolicy_ALLOW, "", []*securityapi.Rule{base()}))
	}
	for j, az := range jwt.Authorizations {
		var aud []*securityapi.Condition
		for _, a := range az.Audiences {
			aud = append(aud, &securityapi.Condition{Key: audienceKey, Values: []string{a}})
		}
		var rules []*securityapi.Rule
		if len(az.RequiredScopes) == 0 {
			rules = []*securityapi.Rule{base(aud...)}
		} else {
			for _, key := range scopeKeys {
				var conds []*securityapi.Condition
				for _, s := range az.RequiredScopes {
					conds = append(conds, &securityapi.Condition{Key: key, Values: []string{s}})
				}
				rules = append(rules, base(append(conds, aud...)...))
			}
		}
		out = append(out, newAP(fmt.Sprintf("allow/%d", j), securityapi.AuthorizationPolicy_ALLOW, "", rules))
	}
	return out
}

func requestAuthentication(api *gatewayv1alpha1.APIRule, idx int, sel map[string]string) *securityv1.RequestAuthentication {
	r := &api.Spec.Rules[idx]
	jwt := r.Jwt
	if jwt == nil && r.ExtAuth != nil {
		jwt = r.ExtAuth.Restrictions
	}
	if jwt == nil {
		return nil
	}
	ra := &securityv1.RequestAuthentication{ObjectMeta: objectMeta(api, fmt.Sprintf("rule-%d/jwt", idx))}
	ra.APIVersion, ra.Kind = securityv1.SchemeGroupVersion.String(), "RequestAuthentication"
	ra.Spec.Selector = &typeapi.WorkloadSelector{MatchLabels: maps.Clone(sel)}
	for _, a := range jwt.Authentications {
		jr := &securityapi.JWTRule{
			Issuer:  a.Issuer,
			JwksUri: a.JwksURI,
			// As Kyma does: the service sees the token it was called with.
			ForwardOriginalToken: true,
			FromParams:           slices.Clone(a.FromParams),
		}
		for _, h := range a.FromHeaders {
			jr.FromHeaders = append(jr.FromHeaders, &securityapi.JWTHeader{Name: h.Name, Prefix: h.Prefix})
		}
		ra.Spec.JwtRules = append(ra.Spec.JwtRules, jr)
	}
	return ra
}

// raKey tells RequestAuthentications apart by workload and token sources.
func raKey(sel map[string]string, rules []*securityapi.JWTRule) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		fmt.Fprintf(&b, "%q=%q,", k, sel[k])
	}
	for _, r := range rules {
		fmt.Fprintf(&b, "|%q %q %q", r.Issuer, r.JwksUri, r.FromParams)
		for _, h := range r.FromHeaders {
			fmt.Fprintf(&b, " %q:%q", h.Name, h.Prefix)
		}
	}
	return b.String()
}
