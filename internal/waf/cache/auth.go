package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
)

// Audience is the token audience the cache server accepts: a data plane
// asks for a ServiceAccount token with this audience (a projected token
// volume, or a TokenRequest). A token for Kubernetes' own audience is
// refused, so a pod's default token cannot read rule sets.
const Audience = "waf.portal.io/cache"

// RuleSetAudience is the audience of a token that reads only the one rule
// set namespace/name; the server accepts it beside Audience. A data plane
// that asks for it limits what a leaked token can read.
func RuleSetAudience(namespace, name string) string {
	return Audience + "/" + namespace + "/" + name
}

// The cross-namespace grant: a SubjectAccessReview for verb get on the
// subresource rulesets/cache of waf.portal.io, in the rule set's namespace
// and with its name. RBAC grants it like any other permission.
const (
	GrantGroup       = "waf.portal.io"
	GrantResource    = "rulesets"
	GrantSubresource = "cache"
	GrantVerb        = "get"
)

// Reasons of a refused request: the reason label of
// portal_waf_cache_requests_denied_total and the "reason" of the log line.
const (
	// DenyNoToken: no "Authorization: Bearer <token>" header (401).
	DenyNoToken = "no_token"
	// DenyUnauthenticated: the API server did not authenticate the token
	// for the cache's audience: expired, revoked, forged or meant for
	// another audience (401).
	DenyUnauthenticated = "unauthenticated"
	// DenyForbidden: the token is valid but its ServiceAccount lives in
	// another namespace and RBAC grants it no get on rulesets/cache there
	// (403).
	DenyForbidden = "forbidden"
	// DenyReviewFailed: the TokenReview or SubjectAccessReview could not be
	// made (API server unreachable); not cached (503).
	DenyReviewFailed = "review_failed"
	// DenyOverloaded: the server already answers MaxConcurrent requests
	// (503).
	DenyOverloaded = "overloaded"
)

// Decision is what an Authorizer says of a request.
type Decision struct {
	// Allowed lets the request read the rule set.
	Allowed bool
	// Reason is DenyUnauthenticated or DenyForbidden when not Allowed.
	Reason string
	// User is who the token authenticated as, when it did (for logs).
	User string
}

// Authorizer decides whether the bearer of token may read the rule set
// namespace/name. An error means no decision could be made.
type Authorizer interface {
	Authorize(ctx context.Context, token, namespace, name string) (Decision, error)
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, token, namespace, name string) (Decision, error)

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, token, namespace, name string) (Decision, error) {
	return f(ctx, token, namespace, name)
}

// TokenReviewer creates TokenReviews: client-go's
// AuthenticationV1().TokenReviews().
type TokenReviewer interface {
	Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// AccessReviewer creates SubjectAccessReviews: client-go's
// AuthorizationV1().SubjectAccessReviews().
type AccessReviewer interface {
	Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// Defaults of KubeAuthorizer.
const (
	DefaultAllowTTL       = 30 * time.Second
	DefaultDenyTTL        = 10 * time.Second
	DefaultDecisionsCache = 4096
	reviewTimeout         = 10 * time.Second
)

// KubeAuthorizer authenticates bearer tokens with a TokenReview for
// Audience (or the rule set's own audience) and allows a ServiceAccount to
// read the rule sets of its own namespace. Anything else needs RBAC: a
// SubjectAccessReview for get on rulesets/cache in the rule set's
// namespace. Decisions are kept briefly in a bounded LRU keyed by the
// token's sha256 and the rule set, so a poll costs the API server nothing
// most of the time and a flood of forged tokens costs it at most one review
// each.
type KubeAuthorizer struct {
	Tokens TokenReviewer
	Access AccessReviewer
	// AllowTTL and DenyTTL are how long a decision is reused; a revoked
	// token keeps reading for at most AllowTTL.
	AllowTTL, DenyTTL time.Duration
	// Metrics, when set, counts the reviews made.
	Metrics *Metrics

	decisions *utilcache.LRUExpireCache
}

// NewKubeAuthorizer returns an authorizer with the default TTLs that
// remembers at most size decisions (DefaultDecisionsCache when size <= 0).
func NewKubeAuthorizer(tokens TokenReviewer, access AccessReviewer, size int, m *Metrics) *KubeAuthorizer {
	return newKubeAuthorizer(tokens, access, size, m, clock.RealClock{})
}

func newKubeAuthorizer(tokens TokenReviewer, access AccessReviewer, size int, m *Metrics, clk clock.Clock) *KubeAuthorizer {
	if size <= 0 {
		size = DefaultDecisionsCache
	}
	return &KubeAuthorizer{
		Tokens: tokens, Access: access, AllowTTL: DefaultAllowTTL, DenyTTL: DefaultDenyTTL, Metrics: m,
		decisions: utilcache.NewLRUExpireCacheWithClock(size, clk),
	}
}

// Authorize implements Authorizer.
func (a *KubeAuthorizer) Authorize(ctx context.Context, token, namespace, name string) (Decision, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:]) + "/" + Key(namespace, name)
	if d, ok := a.decisions.Get(key); ok {
		return d.(Decision), nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	d, err := a.decide(ctx, token, namespace, name)
	if err != nil {
		return Decision{}, err
	}
	ttl := a.DenyTTL
	if d.Allowed {
		ttl = a.AllowTTL
	}
	a.decisions.Add(key, d, ttl)
	return d, nil
}

func (a *KubeAuthorizer) decide(ctx context.Context, token, namespace, name string) (Decision, error) {
	tr, err := a.Tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
		Token:     token,
		Audiences: []string{Audience, RuleSetAudience(namespace, name)},
	}}, metav1.CreateOptions{})
	if err != nil {
		a.Metrics.reviewed("token", "error")
		return Decision{}, fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	// An authenticator that ignores audiences answers with none: refuse it,
	// or a token for any audience would do.
	if !st.Authenticated || !slices.ContainsFunc(st.Audiences, func(aud string) bool {
		return aud == Audience || aud == RuleSetAudience(namespace, name)
	}) {
		a.Metrics.reviewed("token", "denied")
		return Decision{Reason: DenyUnauthenticated}, nil
	}
	a.Metrics.reviewed("token", "allowed")
	user := st.User
	if ns, _, ok := ServiceAccount(user.Username); ok && ns == namespace {
		return Decision{Allowed: true, User: user.Username}, nil
	}
	if a.Access == nil {
		return Decision{Reason: DenyForbidden, User: user.Username}, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.Access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Name: name, Verb: GrantVerb,
			Group: GrantGroup, Resource: GrantResource, Subresource: GrantSubresource,
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		a.Metrics.reviewed("access", "error")
		return Decision{}, fmt.Errorf("subject access review: %w", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		a.Metrics.reviewed("access", "denied")
		return Decision{Reason: DenyForbidden, User: user.Username}, nil
	}
	a.Metrics.reviewed("access", "allowed")
	return Decision{Allowed: true, User: user.Username}, nil
}

// ServiceAccount splits a ServiceAccount's user name,
// system:serviceaccount:<namespace>:<name>.
func ServiceAccount(username string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}

// errNoAuthorizer is what a server without an Authorizer answers: it
// refuses everything rather than serve without checks.
var errNoAuthorizer = errors.New("rule set cache: no authorizer configured")
