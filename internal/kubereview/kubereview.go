// Package kubereview asks the API server who a bearer token belongs to (a
// TokenReview) and whether that user may do something (a
// SubjectAccessReview), for Portal's servers that anything on the network
// can reach: /metrics and the WAF rule set cache.
//
// Every caller of such a server is untrusted until reviewed, so the bounds
// are the point: answers are cached in LRUs of a fixed size (refused tokens
// apart from trusted ones, so a flood of forged tokens cannot push a
// client's entry out), at most MaxInFlight reviews of each kind are made at
// once and a request waits at most SlotWait for one, and a token the API
// server authenticated recently is reviewed again on slots of its own, so
// that such a flood does not cost a known client its requests when its
// cache entry expires. A failed review is not cached and not retried.
package kubereview

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
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

// Options tune a Reviewer. The zero value takes every default.
type Options struct {
	// TokenTTL is how long an authenticated token is trusted without a
	// review (default 1 minute, as controller-runtime's metrics filter).
	TokenTTL time.Duration
	// AllowTTL and DenyTTL are how long an authorization, and a refusal of a
	// token or of its user, are reused (defaults 5 minutes and 30 seconds,
	// controller-runtime's for authorizations). A revoked token is trusted
	// for at most TokenTTL more, a removed grant for at most AllowTTL.
	AllowTTL, DenyTTL time.Duration
	// CacheSize bounds each cache: authenticated tokens, refused tokens,
	// recently known tokens and authorizations (default 1024 entries, least
	// recently used go first).
	CacheSize int
	// MaxInFlight bounds the reviews being made at once, of unknown tokens,
	// of recently known tokens and of access, each apart (default 8 each).
	MaxInFlight int
	// SlotWait is how long a review waits for a slot before it gives up
	// with ErrBusy (default 1 second): a flood of forged tokens holds at
	// most MaxInFlight reviews and a second's worth of waiting requests.
	// A token authenticated within the last ten TokenTTLs is reviewed again
	// on slots of its own.
	SlotWait time.Duration
	// Clock decides when cached answers expire and how long a review waits
	// for a slot (default the real clock).
	Clock clock.Clock
	// Reviewed, when set, is called once for each review made (not for an
	// answer from a cache) with the review ("token" or "access") and its
	// result ("allowed", "denied" or "error"), for a server's metrics.
	Reviewed func(review, result string)
}

// Defaults of Options.
const (
	DefaultTokenTTL    = time.Minute
	DefaultAllowTTL    = 5 * time.Minute
	DefaultDenyTTL     = 30 * time.Second
	DefaultCacheSize   = 1024
	DefaultMaxInFlight = 8
	DefaultSlotWait    = time.Second
	reviewTimeout      = 10 * time.Second
	// knownFor is how many TokenTTLs a token stays known, and so reviewed
	// on the known tokens' slots, after the API server authenticated it.
	knownFor = 10
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
	if o.Reviewed == nil {
		o.Reviewed = func(string, string) {}
	}
	return o
}

// ErrBusy: every slot for the review stayed taken for SlotWait. A server
// answers it 503 with Retry-After.
var ErrBusy = errors.New("every review slot is taken")

// Reviewer reviews tokens and access with the API server, within the
// bounds of its Options. It is safe for concurrent use.
type Reviewer struct {
	tokens TokenReviewer
	access AccessReviewer
	opts   Options
	// The caches, keyed by SHA-256: of a token and the audiences it was
	// reviewed for (trusted -> its user, refused -> why, known ->
	// struct{}), of an access review's whole question (decisions ->
	// decision).
	trusted, refused, known, decisions  *utilcache.LRUExpireCache
	tokenSlots, knownSlots, accessSlots chan struct{}
}

// New returns a Reviewer that reviews with tokens and access.
func New(tokens TokenReviewer, access AccessReviewer, opts Options) *Reviewer {
	opts = opts.withDefaults()
	cache := func() *utilcache.LRUExpireCache {
		return utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, opts.Clock)
	}
	return &Reviewer{
		tokens: tokens, access: access, opts: opts,
		trusted: cache(), refused: cache(), known: cache(), decisions: cache(),
		tokenSlots:  make(chan struct{}, opts.MaxInFlight),
		knownSlots:  make(chan struct{}, opts.MaxInFlight),
		accessSlots: make(chan struct{}, opts.MaxInFlight),
	}
}

// Options returns the options in force, defaults filled in.
func (r *Reviewer) Options() Options { return r.opts }

// slot takes one of slots, waiting at most SlotWait.
func (r *Reviewer) slot(ctx context.Context, slots chan struct{}) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	release = func() { <-slots }
	select {
	case slots <- struct{}{}:
		return release, nil
	default:
	}
	t := r.opts.Clock.NewTimer(r.opts.SlotWait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return release, nil
	case <-t.C():
		return nil, ErrBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tokenKey is the SHA-256 of the token and the audiences, each with its
// length first, so no two different questions share a key.
func tokenKey(token string, audiences []string) [sha256.Size]byte {
	h := sha256.New()
	for _, s := range append([]string{token}, audiences...) {
		_ = binary.Write(h, binary.BigEndian, uint64(len(s)))
		h.Write([]byte(s))
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// Authenticate returns the user the API server authenticates token as, for
// one of audiences (the API server's own when there are none), or nil and
// why not. An error means no review could be made: ErrBusy, the context's
// error, or the API server's.
func (r *Reviewer) Authenticate(ctx context.Context, token string, audiences ...string) (*authenticationv1.UserInfo, string, error) {
	key := tokenKey(token, audiences)
	if v, ok := r.trusted.Get(key); ok {
		return v.(*authenticationv1.UserInfo), "", nil
	}
	if _, ok := r.refused.Get(key); ok {
		return nil, "refused within the last " + r.opts.DenyTTL.String(), nil
	}
	slots := r.tokenSlots
	if _, ok := r.known.Get(key); ok {
		slots = r.knownSlots
	}
	release, err := r.slot(ctx, slots)
	if err != nil {
		return nil, "", err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := r.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
		Token: token, Audiences: audiences,
	}}, metav1.CreateOptions{})
	if err != nil {
		r.opts.Reviewed("token", "error")
		return nil, "", fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	why := st.Error
	// An authenticator that ignores audiences answers with none: refuse it,
	// or a token for any audience would do.
	if st.Authenticated && len(audiences) > 0 && !slices.ContainsFunc(st.Audiences, func(a string) bool { return slices.Contains(audiences, a) }) {
		st.Authenticated, why = false, fmt.Sprintf("the token is not for audience %q", audiences[0])
	}
	if !st.Authenticated {
		r.opts.Reviewed("token", "denied")
		r.refused.Add(key, struct{}{}, r.opts.DenyTTL)
		return nil, why, nil
	}
	r.opts.Reviewed("token", "allowed")
	u := st.User
	r.trusted.Add(key, &u, r.opts.TokenTTL)
	r.known.Add(key, struct{}{}, knownFor*r.opts.TokenTTL)
	return &u, "", nil
}

// Subject is a SubjectAccessReviewSpec for u, to which the caller adds the
// resource or non-resource attributes it asks about.
func Subject(u *authenticationv1.UserInfo) authorizationv1.SubjectAccessReviewSpec {
	extra := make(map[string]authorizationv1.ExtraValue, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	return authorizationv1.SubjectAccessReviewSpec{User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra}
}

// decision is a cached access review: allowed, or why not.
type decision struct {
	allowed bool
	why     string
}

// Authorize says whether the API server allows what spec asks, and why
// not. An error means no review could be made, as for Authenticate.
func (r *Reviewer) Authorize(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (bool, string, error) {
	key, err := decisionKey(&spec)
	if err != nil {
		return false, "", err
	}
	if v, ok := r.decisions.Get(key); ok {
		d := v.(decision)
		return d.allowed, d.why, nil
	}
	release, err := r.slot(ctx, r.accessSlots)
	if err != nil {
		return false, "", err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	sar, err := r.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		r.opts.Reviewed("access", "error")
		return false, "", fmt.Errorf("subject access review: %w", err)
	}
	d := decision{allowed: sar.Status.Allowed && !sar.Status.Denied}
	ttl := r.opts.AllowTTL
	if !d.allowed {
		r.opts.Reviewed("access", "denied")
		ttl, d.why = r.opts.DenyTTL, sar.Status.Reason
		r.decisions.Add(key, decision{why: "refused within the last " + r.opts.DenyTTL.String()}, ttl)
		return false, d.why, nil
	}
	r.opts.Reviewed("access", "allowed")
	r.decisions.Add(key, d, ttl)
	return true, "", nil
}

// decisionKey is the SHA-256 of everything a SubjectAccessReview asks, in
// JSON: the user's name, UID, groups and extra (map keys sorted), and the
// resource or path, so one user's answer never serves another.
func decisionKey(spec *authorizationv1.SubjectAccessReviewSpec) ([sha256.Size]byte, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("subject access review key: %w", err)
	}
	return sha256.Sum256(b), nil
}
