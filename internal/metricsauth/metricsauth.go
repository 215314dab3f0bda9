// Package metricsauth guards Portal's /metrics: a request gets through only
// when the API server authenticates its bearer token (a TokenReview) and
// authorizes that user for get on the request's path as a non-resource URL
// (a SubjectAccessReview), so RBAC decides who scrapes.
//
// controller-runtime's filters.WithAuthenticationAndAuthorization does the
// same through k8s.io/apiserver's delegating authenticator and authorizer.
// Linking those put 114 packages of 25 more modules (gRPC, OpenTelemetry,
// CEL, the API server's own) into every Portal process, a third of the
// package initialisation that each start pays, `portal eval` in CI included
// (docs/performance.md). This is the part of it Portal uses, with the
// filter's lifetimes for authenticated tokens and authorizations, and
// bounds of its own for a client that cannot be trusted: only GET is
// reviewed, tokens longer than MaxTokenBytes are not, refused tokens are
// cached apart from trusted ones, at most MaxInFlight reviews of each kind
// are made at once, and a failed review is not retried (the next scrape
// asks again) where the filter retried for up to 10 seconds.
package metricsauth

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vilaca/portal/internal/bearer"
)

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

// Options tune a Guard. The zero value takes every default.
type Options struct {
	// TokenTTL is how long an authenticated token is trusted without a
	// review (default 1 minute, as controller-runtime's filter).
	TokenTTL time.Duration
	// AllowTTL and DenyTTL are how long an authorization, and a refusal of a
	// token or of its user, are reused (defaults 5 minutes and 30 seconds,
	// controller-runtime's for authorizations). A revoked binding keeps
	// scraping for at most AllowTTL.
	AllowTTL, DenyTTL time.Duration
	// CacheSize bounds each of the three caches: authenticated tokens,
	// refused tokens and authorizations (default 1024 entries, least
	// recently used go first). Refused tokens have a cache of their own so
	// that a flood of forged ones cannot push a scraper's token out.
	CacheSize int
	// MaxInFlight bounds the token reviews, and apart from them the access
	// reviews, being made at once (default 8 each).
	MaxInFlight int
	// SlotWait is how long a request that needs a review waits for a slot
	// (default 1 second) before it is answered 503: a flood of forged
	// tokens holds at most MaxInFlight reviews and a second's worth of
	// waiting requests. A token authenticated within the last ten TokenTTLs
	// is reviewed again on slots of its own, so such a flood does not cost
	// a scraper its scrapes when its token's cache entry expires.
	SlotWait time.Duration
	// Clock decides when cached answers expire and how long a request waits
	// for a slot (default the real clock).
	Clock clock.Clock
}

// Defaults of Options, and the longest token reviewed.
const (
	DefaultTokenTTL    = time.Minute
	DefaultAllowTTL    = 5 * time.Minute
	DefaultDenyTTL     = 30 * time.Second
	DefaultCacheSize   = 1024
	DefaultMaxInFlight = 8
	DefaultSlotWait    = time.Second
	// MaxTokenBytes: a longer bearer token is refused without a review. A
	// ServiceAccount token is about 1 KiB and an OIDC token a few; the
	// header itself may be 1 MiB, which would otherwise go to the API
	// server in each review.
	MaxTokenBytes = 16 << 10
	reviewTimeout = 10 * time.Second
)

func (o Options) withDefaults() Options {
	def := func(v, d time.Duration) time.Duration { return cmp.Or(max(v, 0), d) }
	o.TokenTTL = def(o.TokenTTL, DefaultTokenTTL)
	o.AllowTTL = def(o.AllowTTL, DefaultAllowTTL)
	o.DenyTTL = def(o.DenyTTL, DefaultDenyTTL)
	o.SlotWait = def(o.SlotWait, DefaultSlotWait)
	o.CacheSize = cmp.Or(max(o.CacheSize, 0), DefaultCacheSize)
	o.MaxInFlight = cmp.Or(max(o.MaxInFlight, 0), DefaultMaxInFlight)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Guard authenticates and authorizes requests with the API server.
type Guard struct {
	tokens TokenReviewer
	access AccessReviewer
	opts   Options
	// The caches, keyed by SHA-256: of a token (trusted -> its user,
	// refused -> struct{}), of the access review's whole question
	// (decisions -> bool).
	trusted, refused, decisions *utilcache.LRUExpireCache
	// known: tokens authenticated within the last ten TokenTTLs, whose
	// reviews take knownSlots rather than tokenSlots.
	known                               *utilcache.LRUExpireCache
	tokenSlots, knownSlots, accessSlots chan struct{}
	// errLog lets one failed review a minute be logged as an error; the
	// rest go to the debug log, so a throttled API server does not flood
	// the log one line a request.
	errLog *rate.Limiter
}

// New returns a Guard that reviews with tokens and access.
func New(tokens TokenReviewer, access AccessReviewer, opts Options) *Guard {
	opts = opts.withDefaults()
	cache := func() *utilcache.LRUExpireCache {
		return utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, opts.Clock)
	}
	return &Guard{
		tokens: tokens, access: access, opts: opts,
		trusted: cache(), refused: cache(), decisions: cache(), known: cache(),
		tokenSlots:  make(chan struct{}, opts.MaxInFlight),
		knownSlots:  make(chan struct{}, opts.MaxInFlight),
		accessSlots: make(chan struct{}, opts.MaxInFlight),
		errLog:      rate.NewLimiter(rate.Every(time.Minute), 1),
	}
}

// FilterProvider is controller-runtime's metrics server FilterProvider: a
// Guard that reviews with the manager's API server connection.
func FilterProvider(opts Options) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(cfg *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
		authn, err := authenticationv1client.NewForConfigAndClient(cfg, hc)
		if err != nil {
			return nil, fmt.Errorf("metrics authentication client: %w", err)
		}
		authz, err := authorizationv1client.NewForConfigAndClient(cfg, hc)
		if err != nil {
			return nil, fmt.Errorf("metrics authorization client: %w", err)
		}
		g := New(authn.TokenReviews(), authz.SubjectAccessReviews(), opts)
		return func(log logr.Logger, next http.Handler) (http.Handler, error) {
			return g.Wrap(log, next), nil
		}, nil
	}
}

// Wrap returns next behind the guard.
func (g *Guard) Wrap(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			// Only get is ever reviewed: a method of the client's choosing
			// would make a review and a cache entry per method.
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "metrics: only GET is served", http.StatusMethodNotAllowed)
			return
		}
		a := g.decide(r.Context(), r)
		if r.Context().Err() != nil {
			// The client hung up: nobody reads the answer, and its
			// cancelled review is no fault of the API server's.
			return
		}
		switch {
		case a.err != nil && g.errLog.Allow():
			log.Error(a.err, "cannot review a metrics request", "path", r.URL.Path)
		case a.err != nil:
			log.V(1).Info("cannot review a metrics request", "path", r.URL.Path, "error", a.err.Error())
		case a.why != "":
			// The API server's messages stay in Portal's log, out of
			// answers to clients nobody has authenticated yet.
			log.V(1).Info("metrics request refused", "status", a.code, "reason", a.why)
		}
		if a.code != http.StatusOK {
			if a.code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, a.msg, a.code)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// answer is what a request gets: the HTTP status (200 lets it through),
// the message otherwise, and for the log the error that made a review fail
// or the API server's reason for a refusal.
type answer struct {
	code     int
	msg, why string
	err      error
}

func (g *Guard) decide(ctx context.Context, r *http.Request) answer {
	token, ok := bearer.Token(r.Header.Get("Authorization"), MaxTokenBytes)
	if !ok {
		return answer{code: http.StatusUnauthorized, msg: fmt.Sprintf("metrics: send a ServiceAccount token of at most %d bytes as Authorization: Bearer <token>", MaxTokenBytes)}
	}
	user, why, err := g.authenticate(ctx, token)
	switch {
	case errors.Is(err, errBusy):
		return answer{code: http.StatusServiceUnavailable, msg: "metrics: too many token reviews in flight, retry"}
	case err != nil:
		return answer{code: http.StatusServiceUnavailable, msg: "metrics: the API server could not review the token", err: err}
	case user == nil:
		return answer{code: http.StatusUnauthorized, msg: "metrics: the API server did not authenticate the token", why: why}
	}
	allowed, why, err := g.authorize(ctx, user, r.URL.Path)
	switch {
	case errors.Is(err, errBusy):
		return answer{code: http.StatusServiceUnavailable, msg: "metrics: too many access reviews in flight, retry"}
	case err != nil:
		return answer{code: http.StatusServiceUnavailable, msg: "metrics: the API server could not review the access", err: err}
	case !allowed:
		return answer{code: http.StatusForbidden, why: why,
			msg: fmt.Sprintf("metrics: %s may not get %s: bind it to a ClusterRole with nonResourceURLs [%s] and verbs [get]", user.Username, r.URL.Path, r.URL.Path)}
	}
	return answer{code: http.StatusOK}
}

// errBusy: every review slot stayed taken for SlotWait.
var errBusy = errors.New("metrics: every review slot is taken")

// slot takes one of the review slots of slots, waiting at most SlotWait.
func (g *Guard) slot(ctx context.Context, slots chan struct{}) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	release = func() { <-slots }
	select {
	case slots <- struct{}{}:
		return release, nil
	default:
	}
	t := g.opts.Clock.NewTimer(g.opts.SlotWait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return release, nil
	case <-t.C():
		return nil, errBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// authenticate returns the user the API server authenticates token as, or
// nil and why not.
func (g *Guard) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, string, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := g.trusted.Get(key); ok {
		return v.(*authenticationv1.UserInfo), "", nil
	}
	if _, ok := g.refused.Get(key); ok {
		return nil, "refused within the last " + g.opts.DenyTTL.String(), nil
	}
	slots := g.tokenSlots
	if _, ok := g.known.Get(key); ok {
		slots = g.knownSlots
	}
	release, err := g.slot(ctx, slots)
	if err != nil {
		return nil, "", err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := g.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		g.refused.Add(key, struct{}{}, g.opts.DenyTTL)
		return nil, tr.Status.Error, nil
	}
	u := tr.Status.User
	g.trusted.Add(key, &u, g.opts.TokenTTL)
	g.known.Add(key, struct{}{}, 10*g.opts.TokenTTL)
	return &u, "", nil
}

// authorize says whether the API server lets u get path, and why not.
func (g *Guard) authorize(ctx context.Context, u *authenticationv1.UserInfo, path string) (bool, string, error) {
	extra := make(map[string]authorizationv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	spec := authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
	}
	key, err := decisionKey(&spec)
	if err != nil {
		return false, "", err
	}
	if v, ok := g.decisions.Get(key); ok {
		if v.(bool) {
			return true, "", nil
		}
		return false, "refused within the last " + g.opts.DenyTTL.String(), nil
	}
	release, err := g.slot(ctx, g.accessSlots)
	if err != nil {
		return false, "", err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	sar, err := g.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("subject access review: %w", err)
	}
	allowed := sar.Status.Allowed && !sar.Status.Denied
	ttl := g.opts.DenyTTL
	if allowed {
		ttl = g.opts.AllowTTL
	}
	g.decisions.Add(key, allowed, ttl)
	return allowed, sar.Status.Reason, nil
}

// decisionKey is the SHA-256 of everything a SubjectAccessReview asks, in
// JSON: the user's name, UID, groups and extra (map keys sorted), and the
// path, so one user's answer never serves another.
func decisionKey(spec *authorizationv1.SubjectAccessReviewSpec) ([sha256.Size]byte, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("subject access review key: %w", err)
	}
	return sha256.Sum256(b), nil
}
