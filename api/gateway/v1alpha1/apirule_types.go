package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Host is a DNS name the APIRule is served on; a leading `*.` makes it a
// wildcard for one label.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^(\*\.)?([a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?\.)*[a-zA-Z0-9]([-a-zA-Z0-9]{0,61}[a-zA-Z0-9])?$`
type Host string

// Timeout is a request timeout in seconds, 1 to 3900 (65 minutes).
// +kubebuilder:validation:Minimum=1
// +kubebuilder:validation:Maximum=3900
type Timeout uint16

// HTTPMethod is an HTTP request method of RFC 9110 or PATCH (RFC 5789).
// +kubebuilder:validation:Enum=GET;HEAD;POST;PUT;DELETE;CONNECT;OPTIONS;TRACE;PATCH
type HTTPMethod string

// Service is the Kubernetes Service requests are forwarded to.
type Service struct {
	// Name of the Service.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Namespace of the Service; the APIRule's namespace when unset. Kept
	// for manifests of the anchor: the controller is to refuse a namespace
	// other than the APIRule's, so no one exposes another namespace's
	// Services.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace *string `json:"namespace,omitempty"`

	// Port of the Service.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port uint32 `json:"port"`
}

// StringMatch matches a string: exactly one of exact, prefix or regex.
// +kubebuilder:validation:XValidation:rule="[has(self.exact), has(self.prefix), has(self.regex)].filter(x, x).size() == 1",message="set exactly one of exact, prefix or regex"
type StringMatch struct {
	// Exact matches this string.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Exact *string `json:"exact,omitempty"`
	// Prefix matches strings that start with this one.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Prefix *string `json:"prefix,omitempty"`
	// Regex matches strings that this RE2 regular expression matches in full.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Regex *string `json:"regex,omitempty"`
}

// CorsPolicy is the CORS configuration of the APIRule's hosts. Without one,
// the gateway answers no preflight request and adds no CORS header.
type CorsPolicy struct {
	// AllowHeaders is Access-Control-Allow-Headers.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	// +optional
	AllowHeaders []string `json:"allowHeaders,omitempty"`
	// AllowMethods is Access-Control-Allow-Methods.
	// +kubebuilder:validation:MaxItems=9
	// +listType=set
	// +optional
	AllowMethods []HTTPMethod `json:"allowMethods,omitempty"`
	// AllowOrigins are the origins allowed to make requests; a request's
	// Origin that matches one is echoed in Access-Control-Allow-Origin.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	AllowOrigins []StringMatch `json:"allowOrigins,omitempty"`
	// AllowCredentials is Access-Control-Allow-Credentials.
	// +optional
	AllowCredentials *bool `json:"allowCredentials,omitempty"`
	// ExposeHeaders is Access-Control-Expose-Headers.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	// +optional
	ExposeHeaders []string `json:"exposeHeaders,omitempty"`
	// MaxAge is Access-Control-Max-Age, in seconds.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxAge *uint64 `json:"maxAge,omitempty"`
}

// JwtHeader is a request header that carries the token.
type JwtHeader struct {
	// Name of the header.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// Prefix before the token in the header's value, such as `Bearer `.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Prefix string `json:"prefix,omitempty"`
}

// JwtAuthentication says which issuer's tokens are accepted and where a
// request carries them.
type JwtAuthentication struct {
	// Issuer is the token's `iss` claim.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	Issuer string `json:"issuer"`
	// JwksURI is the URL of the issuer's JSON Web Key Set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https']",message="jwksUri must be an http or https URL"
	JwksURI string `json:"jwksUri"`
	// FromHeaders are the headers the token is read from; the
	// Authorization header with prefix `Bearer ` when none is set.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	FromHeaders []JwtHeader `json:"fromHeaders,omitempty"`
	// FromParams are the query parameters the token is read from.
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=256
	// +optional
	FromParams []string `json:"fromParams,omitempty"`
}

// JwtAuthorization is one way for a validated token to be allowed: it must
// carry all the required scopes and one of the audiences.
// +kubebuilder:validation:XValidation:rule="has(self.requiredScopes) || has(self.audiences)",message="an authorization needs requiredScopes or audiences"
type JwtAuthorization struct {
	// RequiredScopes must all be in the token's `scp`, `scope` or `scopes`
	// claim.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +optional
	RequiredScopes []string `json:"requiredScopes,omitempty"`
	// Audiences: the token's `aud` claim must hold one of them.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +optional
	Audiences []string `json:"audiences,omitempty"`
}

// JwtConfig says how requests authenticate with a JSON Web Token and which
// tokens are then allowed. A request without a valid token is refused.
type JwtConfig struct {
	// Authentications are the accepted token issuers.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Authentications []JwtAuthentication `json:"authentications"`
	// Authorizations: a token is allowed when it meets one of them; any
	// valid token is allowed when none is set.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Authorizations []JwtAuthorization `json:"authorizations,omitempty"`
}

// ExtAuth sends requests to external authorizers before the service.
type ExtAuth struct {
	// Authorizers are the names of Istio extension providers (meshConfig
	// extensionProviders) that authorize each request.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=set
	Authorizers []string `json:"authorizers"`
	// Restrictions additionally require a JSON Web Token.
	// +optional
	Restrictions *JwtConfig `json:"restrictions,omitempty"`
}

// Request changes the request before it reaches the service.
type Request struct {
	// Cookies set on the request, by name.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z0-9!#$%&\\'*+.^_|~-]{1,256}$'))",message="a cookie name is 1 to 256 of the characters A-Z a-z 0-9 and !#$%&'*+-.^_|~"
	// +optional
	Cookies map[string]string `json:"cookies,omitempty"`
	// Headers set on the request, by name.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[A-Za-z0-9!#$%&\\'*+.^_|~-]{1,256}$'))",message="a header name is 1 to 256 of the characters A-Z a-z 0-9 and !#$%&'*+-.^_|~"
	// +optional
	Headers map[string]string `json:"headers,omitempty"`
}

// HeaderMatch matches a request header by name and value.
type HeaderMatch struct {
	// Name of the header.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!#$%&'*+\-.^_|~]+$`
	Name string `json:"name"`

	StringMatch `json:",inline"`
}

// Match narrows a rule to requests with more in common than path and method.
type Match struct {
	// Headers the request must all carry.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Headers []HeaderMatch `json:"headers,omitempty"`
}

// Rule says how requests to a path are authenticated and where they go.
// +kubebuilder:validation:XValidation:rule="(has(self.noAuth) && self.noAuth ? 1 : 0) + (has(self.jwt) ? 1 : 0) + (has(self.extAuth) ? 1 : 0) == 1",message="set exactly one of noAuth: true, jwt or extAuth"
type Rule struct {
	// Path is matched against the request path. A segment `{*}` matches
	// one segment, `{**}` any number of segments (zero or more) and may only
	// be the last segment; `/*` matches every path. Two rules with the same
	// path, a method in common and the same header match are refused (the
	// first would hide the other); overlaps through wildcards, such as
	// `/{**}` before `/orders`, are for the controller to report.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^((/([A-Za-z0-9-._~!$&'()+,;=:@]|%[0-9a-fA-F]{2})*)|(/\{\*{1,2}\}))+$|^/\*$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('{**}') || self.indexOf('{**}') == size(self) - 4",message="{**} may appear once, as the last segment of the path"
	Path string `json:"path"`

	// Methods the rule applies to; every method when unset.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=9
	// +listType=set
	// +optional
	Methods []HTTPMethod `json:"methods,omitempty"`

	// Match narrows the rule to requests with these headers.
	// +optional
	Match *Match `json:"match,omitempty"`

	// NoAuth: true forwards requests without authentication.
	// +optional
	NoAuth *bool `json:"noAuth,omitempty"`

	// Jwt requires a JSON Web Token.
	// +optional
	Jwt *JwtConfig `json:"jwt,omitempty"`

	// ExtAuth asks external authorizers.
	// +optional
	ExtAuth *ExtAuth `json:"extAuth,omitempty"`

	// Service for this rule; spec.service when unset.
	// +optional
	Service *Service `json:"service,omitempty"`

	// Timeout for this rule, in seconds; spec.timeout when unset.
	// +optional
	Timeout *Timeout `json:"timeout,omitempty"`

	// Request changes requests before they reach the service.
	// +optional
	Request *Request `json:"request,omitempty"`
}

// APIRuleSpec says on which hosts and paths a service is exposed and how
// requests are authenticated.
// +kubebuilder:validation:XValidation:rule="has(self.service) || self.rules.all(r, has(r.service))",message="set spec.service, or a service on every rule"
// +kubebuilder:validation:XValidation:rule="self.rules.all(a, self.rules.filter(b, b.path == a.path && (!has(a.methods) || !has(b.methods) || a.methods.exists(m, m in b.methods)) && has(a.match) == has(b.match) && (!has(a.match) || a.match == b.match)).size() == 1)",message="two rules have the same path, a method in common and the same header match: a request takes the first, so the later would never be used; merge them or tell them apart"
type APIRuleSpec struct {
	// Hosts the service is exposed on: DNS names (a leading `*.` for a
	// wildcard), each once. A short name without dots is completed with the
	// gateway's domain by the controller.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	Hosts []Host `json:"hosts"`

	// Gateway is the Istio Gateway, as `namespace/name`.
	// +kubebuilder:validation:MaxLength=127
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Gateway string `json:"gateway"`

	// Service requests are forwarded to, unless a rule names its own.
	// +optional
	Service *Service `json:"service,omitempty"`

	// CorsPolicy is the CORS configuration.
	// +optional
	CorsPolicy *CorsPolicy `json:"corsPolicy,omitempty"`

	// Rules, in order: a request takes the first rule that matches it.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Rules []Rule `json:"rules"`

	// Timeout for requests, in seconds; 180 when unset.
	// +optional
	Timeout *Timeout `json:"timeout,omitempty"`
}

// APIRule exposes a Service through an Istio Gateway: on its hosts, each
// rule forwards the requests of a path and methods to the service once they
// pass the rule's authentication (none, a JSON Web Token or external
// authorizers).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=apir,categories={portal,gateway}
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Hosts",type=string,JSONPath=`.spec.hosts`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type APIRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec APIRuleSpec `json:"spec"`
	// +optional
	Status Status `json:"status,omitempty"`
}

// APIRuleList is a list of APIRules.
// +kubebuilder:object:root=true
type APIRuleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []APIRule `json:"items"`
}
