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
// (docs/performance.md). This is the part of it Portal uses, with its
// caches' lifetimes, and two bounds of its own: only GET is reviewed, and
// at most MaxInFlight reviews are made at once.
package metricsauth

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
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
	// as controller-runtime's filter). A revoked binding keeps scraping for
	// at most AllowTTL.
	AllowTTL, DenyTTL time.Duration
	// CacheSize bounds each of the two caches, tokens and decisions
	// (default 1024 entries, least recently used go first).
	CacheSize int
	// MaxInFlight bounds the reviews being made at once (default 8): a
	// request that would need one more is answered 503 at once, so a flood
	// of forged tokens neither piles up goroutines nor queues behind the
	// client's rate limiter.
	MaxInFlight int
	// Clock decides when cached answers expire (default the real clock).
	Clock clock.PassiveClock
}

// Defaults of Options.
const (
	DefaultTokenTTL    = time.Minute
	DefaultAllowTTL    = 5 * time.Minute
	DefaultDenyTTL     = 30 * time.Second
	DefaultCacheSize   = 1024
	DefaultMaxInFlight = 8
	reviewTimeout      = 10 * time.Second
)

func (o Options) withDefaults() Options {
	o.TokenTTL = cmp.Or(o.TokenTTL, DefaultTokenTTL)
	o.AllowTTL = cmp.Or(o.AllowTTL, DefaultAllowTTL)
	o.DenyTTL = cmp.Or(o.DenyTTL, DefaultDenyTTL)
	o.CacheSize = cmp.Or(o.CacheSize, DefaultCacheSize)
	o.MaxInFlight = cmp.Or(o.MaxInFlight, DefaultMaxInFlight)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Guard authenticates and authorizes requests with the API server.
type Guard struct {
	tokens   TokenReviewer
	access   AccessReviewer
	opts     Options
	users    *utilcache.LRUExpireCache // sha256 of a token -> reviewed
	allowed  *utilcache.LRUExpireCache // user and path -> bool
	inFlight chan struct{}
}

// New returns a Guard that reviews with tokens and access.
func New(tokens TokenReviewer, access AccessReviewer, opts Options) *Guard {
	opts = opts.withDefaults()
	return &Guard{
		tokens: tokens, access: access, opts: opts,
		users:    utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, opts.Clock),
		allowed:  utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, opts.Clock),
		inFlight: make(chan struct{}, opts.MaxInFlight),
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
		code, msg, err := g.decide(r.Context(), r)
		if err != nil {
			log.Error(err, "cannot review a metrics request", "path", r.URL.Path)
		}
		if code != http.StatusOK {
			if code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			http.Error(w, msg, code)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// decide returns the HTTP status the request gets (200 lets it through),
// what to tell the client otherwise, and the error that made a review fail.
func (g *Guard) decide(ctx context.Context, r *http.Request) (int, string, error) {
	token, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return http.StatusUnauthorized, "metrics: send a ServiceAccount token as Authorization: Bearer <token>", nil
	}
	tok, err := g.authenticate(ctx, token)
	user := tok.user
	switch {
	case errors.Is(err, errBusy):
		return http.StatusServiceUnavailable, "metrics: too many token reviews in flight, retry", nil
	case err != nil:
		return http.StatusServiceUnavailable, "metrics: the API server could not review the token", err
	case !tok.authenticated && tok.reason != "":
		return http.StatusUnauthorized, "metrics: the API server did not authenticate the token: " + tok.reason, nil
	case !tok.authenticated:
		return http.StatusUnauthorized, "metrics: the API server did not authenticate the token", nil
	}
	allowed, err := g.authorize(ctx, user, r.URL.Path)
	switch {
	case errors.Is(err, errBusy):
		return http.StatusServiceUnavailable, "metrics: too many access reviews in flight, retry", nil
	case err != nil:
		return http.StatusServiceUnavailable, "metrics: the API server could not review the access", err
	case !allowed:
		return http.StatusForbidden, fmt.Sprintf("metrics: %s may not get %s: bind it to a ClusterRole with nonResourceURLs [%s] and verbs [get]", user.Username, r.URL.Path, r.URL.Path), nil
	}
	return http.StatusOK, "", nil
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// errBusy: every review slot is taken.
var errBusy = errors.New("metrics: every review slot is taken")

// slot takes one of the MaxInFlight review slots, or fails at once.
func (g *Guard) slot() (release func(), err error) {
	select {
	case g.inFlight <- struct{}{}:
		return func() { <-g.inFlight }, nil
	default:
		return nil, errBusy
	}
}

func (g *Guard) authenticate(ctx context.Context, token string) (reviewed, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := g.users.Get(key); ok {
		return v.(reviewed), nil
	}
	release, err := g.slot()
	if err != nil {
		return reviewed{}, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := g.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return reviewed{}, fmt.Errorf("token review: %w", err)
	}
	r := reviewed{user: tr.Status.User, authenticated: tr.Status.Authenticated}
	ttl := g.opts.TokenTTL
	if !r.authenticated {
		// What the API server said of the token ("token has expired"),
		// bounded: it goes back to the client.
		r.user, r.reason, ttl = authenticationv1.UserInfo{}, truncate(tr.Status.Error, 256), g.opts.DenyTTL
	}
	g.users.Add(key, r, ttl)
	return r, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// reviewed is a TokenReview's answer, as cached.
type reviewed struct {
	user          authenticationv1.UserInfo
	authenticated bool
	reason        string // why not, when not
}

func (g *Guard) authorize(ctx context.Context, u authenticationv1.UserInfo, path string) (bool, error) {
	key := decisionKey(u, path)
	if v, ok := g.allowed.Get(key); ok {
		return v.(bool), nil
	}
	release, err := g.slot()
	if err != nil {
		return false, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	extra := make(map[string]authorizationv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := g.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	allowed := sar.Status.Allowed && !sar.Status.Denied
	ttl := g.opts.DenyTTL
	if allowed {
		ttl = g.opts.AllowTTL
	}
	g.allowed.Add(key, allowed, ttl)
	return allowed, nil
}

// decisionKey is everything a SubjectAccessReview was asked, hashed: the
// user's name, UID, groups and extra, and the path.
func decisionKey(u authenticationv1.UserInfo, path string) [sha256.Size]byte {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s", len(s), s) }
	field(u.Username)
	field(u.UID)
	field(path)
	fmt.Fprintf(h, "g%d", len(u.Groups))
	for _, g := range u.Groups {
		field(g)
	}
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(h, "e%d", len(keys))
	for _, k := range keys {
		field(k)
		fmt.Fprintf(h, "v%d", len(u.Extra[k]))
		for _, v := range u.Extra[k] {
			field(v)
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
