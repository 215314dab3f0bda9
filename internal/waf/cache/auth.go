package cache

import (
	"context"
	"errors"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/kubereview"
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
	// DenyOverloaded: the server already answers MaxConcurrent requests,
	// or every slot for the review the request needs stayed taken for a
	// second (503).
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

// TokenReviewer and AccessReviewer create TokenReviews and
// SubjectAccessReviews: client-go's.
type (
	TokenReviewer  = kubereview.TokenReviewer
	AccessReviewer = kubereview.AccessReviewer
)

// Defaults of KubeAuthorizer.
const (
	DefaultAllowTTL       = 30 * time.Second
	DefaultDenyTTL        = 10 * time.Second
	DefaultDecisionsCache = 4096
)

// KubeAuthorizer authenticates bearer tokens with a TokenReview for
// Audience (or the rule set's own audience) and allows a ServiceAccount to
// read the rule sets of its own namespace. Anything else needs RBAC: a
// SubjectAccessReview for get on rulesets/cache in the rule set's
// namespace. The reviews are kubereview's: a token is trusted for
// DefaultAllowTTL, a grant kept as long, refusals DefaultDenyTTL, in
// bounded LRUs keyed by sha256, so a poll costs the API server nothing most
// of the time; at most kubereview.DefaultMaxInFlight reviews of unknown
// tokens are made at once, and a data plane's token known from an earlier
// review is reviewed again on slots of its own, so a flood of forged
// tokens neither loads the API server nor stops known data planes from
// reading.
type KubeAuthorizer struct {
	reviews *kubereview.Reviewer
}

// NewKubeAuthorizer returns an authorizer with the default TTLs whose
// caches hold at most size entries each (DefaultDecisionsCache when
// size <= 0); m, when set, counts the reviews made.
func NewKubeAuthorizer(tokens TokenReviewer, access AccessReviewer, size int, m *Metrics) *KubeAuthorizer {
	return newKubeAuthorizer(tokens, access, size, m, clock.RealClock{})
}

func newKubeAuthorizer(tokens TokenReviewer, access AccessReviewer, size int, m *Metrics, clk clock.Clock) *KubeAuthorizer {
	if size <= 0 {
		size = DefaultDecisionsCache
	}
	return &KubeAuthorizer{reviews: kubereview.New(tokens, access, kubereview.Options{
		TokenTTL: DefaultAllowTTL, AllowTTL: DefaultAllowTTL, DenyTTL: DefaultDenyTTL,
		CacheSize: size, Clock: clk, Reviewed: m.reviewed,
	})}
}

// Authorize implements Authorizer. Every review slot staying taken is the
// decision DenyOverloaded, not an error.
func (a *KubeAuthorizer) Authorize(ctx context.Context, token, namespace, name string) (Decision, error) {
	user, _, err := a.reviews.Authenticate(ctx, token, Audience, RuleSetAudience(namespace, name))
	switch {
	case errors.Is(err, kubereview.ErrBusy):
		return Decision{Reason: DenyOverloaded}, nil
	case err != nil:
		return Decision{}, err
	case user == nil:
		return Decision{Reason: DenyUnauthenticated}, nil
	}
	if ns, _, ok := ServiceAccount(user.Username); ok && ns == namespace {
		return Decision{Allowed: true, User: user.Username}, nil
	}
	spec := kubereview.Subject(user)
	spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
		Namespace: namespace, Name: name, Verb: GrantVerb,
		Group: GrantGroup, Resource: GrantResource, Subresource: GrantSubresource,
	}
	allowed, _, err := a.reviews.Authorize(ctx, spec)
	switch {
	case errors.Is(err, kubereview.ErrBusy):
		return Decision{Reason: DenyOverloaded, User: user.Username}, nil
	case err != nil:
		return Decision{}, err
	case !allowed:
		return Decision{Reason: DenyForbidden, User: user.Username}, nil
	}
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
