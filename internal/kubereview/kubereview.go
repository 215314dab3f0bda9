// Package kubereview asks the API server who a bearer token belongs to (a
// TokenReview) and whether that user may do something (a
// SubjectAccessReview), for Portal's servers that anything on the network
// can reach: /metrics and the WAF rule set cache.
//
// Every caller of such a server is untrusted until reviewed, so the bounds
// are the point. Answers are cached in LRUs of a fixed size, each kept
// where what an attacker can make cannot push out what a known client
// needs: an authenticated token's answer by the token alone (one token
// asking many questions takes one entry), refused questions and denied
// access apart from trusted tokens and grants. At most MaxInFlight reviews
// of each kind are made at once, a few more requests wait at most SlotWait
// for one, and a token the API server authenticated recently is reviewed
// again on slots of its own, so that a flood of forged tokens does not cost
// a known client its requests when its cache entry expires. A failed
// review is not cached and not retried.
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
	"sync/atomic"
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
	// CacheSize bounds each cache: trusted tokens, recently known tokens,
	// refused token questions, grants and denials (default 1024 entries,
	// least recently used go first).
	CacheSize int
	// MaxInFlight bounds the reviews being made at once, of unknown tokens,
	// of recently known tokens and of access, each apart (default 8 each);
	// four times as many may wait for one of each. A token the API server
	// authenticated within the last ten TokenTTLs, asked again for an
	// audience it was authenticated for, is reviewed on the known tokens'
	// slots.
	MaxInFlight int
	// SlotWait is how long a review waits for a slot before it gives up
	// with ErrBusy (default 1 second); past 4*MaxInFlight waiting, a review
	// gives up at once.
	SlotWait time.Duration
	// Clock decides when cached answers expire and how long a review waits
	// for a slot (default the real clock).
	Clock clock.Clock
	// Reviewed, when set, is called once for each review made (not for an
	// answer from a cache) with the review ("token" or "access") and its
	// result ("allowed", "denied" or "error"; not for a review whose caller
	// gave up on it), for a server's metrics.
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
	// waitersPerSlot is how many reviews may wait for each slot.
	waitersPerSlot = 4
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

// ErrBusy: every slot for the review stayed taken for SlotWait, or too many
// reviews already waited for one. A server answers it 503 with Retry-After.
var ErrBusy = errors.New("every review slot is taken")

// Reviewer reviews tokens and access with the API server, within the
// bounds of its Options. It is safe for concurrent use.
type Reviewer struct {
	tokens TokenReviewer
	access AccessReviewer
	opts   Options
	// The caches, keyed by SHA-256: trusted and known by the token alone
	// (its answer), refused by the token and the audiences asked, granted
	// and denied by an access review's whole question.
	trusted, known, refused, granted, denied *utilcache.LRUExpireCache
	tokenSlots, knownSlots, accessSlots      *slots
}

// New returns a Reviewer that reviews with tokens and access.
func New(tokens TokenReviewer, access AccessReviewer, opts Options) *Reviewer {
	opts = opts.withDefaults()
	cache := func() *utilcache.LRUExpireCache {
		return utilcache.NewLRUExpireCacheWithClock(opts.CacheSize, opts.Clock)
	}
	newSlots := func() *slots {
		return &slots{free: make(chan struct{}, opts.MaxInFlight), maxWaiting: waitersPerSlot * int64(opts.MaxInFlight)}
	}
	return &Reviewer{
		tokens: tokens, access: access, opts: opts,
		trusted: cache(), known: cache(), refused: cache(), granted: cache(), denied: cache(),
		tokenSlots: newSlots(), knownSlots: newSlots(), accessSlots: newSlots(),
	}
}

// slots are the reviews of one kind being made (a token in free each) and
// the count of those waiting for one.
type slots struct {
	free       chan struct{}
	waiting    atomic.Int64
	maxWaiting int64
}

// slot takes one of s, waiting at most SlotWait, and not at all when
// maxWaiting others already wait.
func (r *Reviewer) slot(ctx context.Context, s *slots) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	release = func() { <-s.free }
	select {
	case s.free <- struct{}{}:
		return release, nil
	default:
	}
	if s.waiting.Add(1) > s.maxWaiting {
		s.waiting.Add(-1)
		return nil, ErrBusy
	}
	defer s.waiting.Add(-1)
	t := r.opts.Clock.NewTimer(r.opts.SlotWait)
	defer t.Stop()
	select {
	case s.free <- struct{}{}:
		return release, nil
	case <-t.C():
		return nil, ErrBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// failed tells Reviewed of a review that could not be made, unless its
// caller gave up on it: a client that hung up says nothing of the API
// server.
func (r *Reviewer) failed(caller context.Context, review string) {
	if caller.Err() == nil {
		r.opts.Reviewed(review, "error")
	}
}

// token is the API server's answer for an authenticated token: who, and
// for which audiences (own: reviewed for the API server's own, no audience
// asked). The audiences are kept as SHA-256s: a caller chooses how long
// they are (a rule set's audience holds its namespace and name), and a
// cache entry's size should not be theirs to choose.
type token struct {
	user      *authenticationv1.UserInfo
	audiences [][sha256.Size]byte
	own       bool
}

// answers says whether the answer holds for a review asking audiences.
func (t token) answers(audiences []string) bool {
	if len(audiences) == 0 || t.own {
		return len(audiences) == 0 && t.own
	}
	return slices.ContainsFunc(audiences, func(a string) bool { return slices.Contains(t.audiences, sha256.Sum256([]byte(a))) })
}

// tokenKey is the SHA-256 of the token and the audiences, each with its
// length first, so no two different questions share a key.
func tokenKey(tok string, audiences []string) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, s := range append([]string{tok}, audiences...) {
		h.Write(binary.BigEndian.AppendUint64(n[:0], uint64(len(s))))
		h.Write([]byte(s))
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// Authenticate returns the user the API server authenticates tok as, for
// one of audiences (the API server's own when there are none), or nil and
// why not. An error means no review could be made: ErrBusy, the context's
// error, or the API server's.
func (r *Reviewer) Authenticate(ctx context.Context, tok string, audiences ...string) (*authenticationv1.UserInfo, string, error) {
	id := sha256.Sum256([]byte(tok))
	if v, ok := r.trusted.Get(id); ok && v.(token).answers(audiences) {
		return v.(token).user, "", nil
	}
	question := tokenKey(tok, audiences)
	if _, ok := r.refused.Get(question); ok {
		return nil, "refused within the last " + r.opts.DenyTTL.String(), nil
	}
	slots := r.tokenSlots
	if v, ok := r.known.Get(id); ok && v.(token).answers(audiences) {
		slots = r.knownSlots
	}
	release, err := r.slot(ctx, slots)
	if err != nil {
		return nil, "", err
	}
	defer release()
	rctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := r.tokens.Create(rctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
		Token: tok, Audiences: audiences,
	}}, metav1.CreateOptions{})
	if err != nil {
		r.failed(ctx, "token")
		return nil, "", fmt.Errorf("token review: %w", err)
	}
	st := tr.Status
	// Only audiences that were asked for are kept: the API server answers
	// within them, and an authenticator that lists more is not believed.
	answer := token{user: &st.User, own: len(audiences) == 0}
	for _, a := range st.Audiences {
		if len(answer.audiences) < maxAudiences && slices.Contains(audiences, a) {
			answer.audiences = append(answer.audiences, sha256.Sum256([]byte(a)))
		}
	}
	if !st.Authenticated || !answer.answers(audiences) {
		// An authenticator that ignores audiences answers with none:
		// refuse it, or a token for any audience would do.
		why := st.Error
		if st.Authenticated {
			why = fmt.Sprintf("the token is not for audience %q", audiences[0])
		}
		r.opts.Reviewed("token", "denied")
		r.refused.Add(question, struct{}{}, r.opts.DenyTTL)
		return nil, why, nil
	}
	r.opts.Reviewed("token", "allowed")
	r.trusted.Add(id, r.merged(r.trusted, id, answer), r.opts.TokenTTL)
	r.known.Add(id, r.merged(r.known, id, answer), knownFor*r.opts.TokenTTL)
	return answer.user, "", nil
}

// maxAudiences bounds the audiences one cached token answers for.
const maxAudiences = 8

// merged is answer with the audiences of the token's entry in c added when
// that entry is the same user's: a token's audiences are fixed when it is
// minted, so one read for two rule sets in turn is not reviewed each time.
// The latest audiences are kept first, at most maxAudiences.
func (r *Reviewer) merged(c *utilcache.LRUExpireCache, id [sha256.Size]byte, answer token) token {
	v, ok := c.Get(id)
	if !ok || answer.own {
		return answer
	}
	old := v.(token)
	if old.own || old.user.Username != answer.user.Username || old.user.UID != answer.user.UID {
		return answer
	}
	auds := slices.Clone(answer.audiences)
	for _, a := range old.audiences {
		if len(auds) < maxAudiences && !slices.Contains(auds, a) {
			auds = append(auds, a)
		}
	}
	answer.audiences = auds
	return answer
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

// Authorize says whether the API server allows what spec asks, and why
// not. An error means no review could be made, as for Authenticate.
func (r *Reviewer) Authorize(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) (bool, string, error) {
	if r.access == nil {
		return false, "no access reviewer", nil
	}
	key, err := decisionKey(&spec)
	if err != nil {
		return false, "", err
	}
	if _, ok := r.granted.Get(key); ok {
		return true, "", nil
	}
	if _, ok := r.denied.Get(key); ok {
		return false, "refused within the last " + r.opts.DenyTTL.String(), nil
	}
	release, err := r.slot(ctx, r.accessSlots)
	if err != nil {
		return false, "", err
	}
	defer release()
	rctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	sar, err := r.access.Create(rctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		r.failed(ctx, "access")
		return false, "", fmt.Errorf("subject access review: %w", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		r.opts.Reviewed("access", "denied")
		r.denied.Add(key, struct{}{}, r.opts.DenyTTL)
		return false, sar.Status.Reason, nil
	}
	r.opts.Reviewed("access", "allowed")
	r.granted.Add(key, struct{}{}, r.opts.AllowTTL)
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
