package forward

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"

	"github.com/vilaca/portal/internal/core"
)

// Defaults of ReceiverOptions.
const (
	DefaultRequestRate  = 50
	DefaultRequestBurst = 100
	DefaultSeen         = 100000
	// identityTTL is how long an authenticated token is trusted without
	// another TokenReview; a revoked token is accepted for at most this.
	identityTTL   = 30 * time.Second
	identities    = 64
	reviewTimeout = 10 * time.Second
	// MaxTokenBytes bounds a bearer token sent on to a TokenReview: a
	// projected ServiceAccount token is about 1 KiB, and the HTTP server
	// alone would let a caller make the API server review 1 MiB ones.
	MaxTokenBytes = 8 << 10
)

// TokenReviewer creates TokenReviews: client-go's
// AuthenticationV1().TokenReviews().
type TokenReviewer interface {
	Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// Local is the leader's actions engine, as the receiver sees it.
type Local interface {
	// Leading reports whether this replica runs the actions now.
	Leading() bool
	// Accept queues v for the actions without forwarding it; false when
	// the queue was full (the engine counts that) or the replica stopped
	// leading.
	Accept(v core.Verdict) bool
}

// ReceiverOptions configure a Receiver.
type ReceiverOptions struct {
	// Tokens authenticates the callers' bearer tokens.
	Tokens TokenReviewer
	// Allowed is the one user the endpoint accepts: Portal's own
	// ServiceAccount, system:serviceaccount:NAMESPACE:NAME.
	Allowed string
	// Rules resolves a reference to a rule the leader holds; nil when it
	// holds none of that name.
	Rules func(RuleRef) *core.Rule
	Local Local
	// RequestRate and RequestBurst bound the TokenReviews per second, so a
	// flood of tokens costs the API server little. A token reviewed lately
	// and found to be the Allowed user's passes without one, so no flood
	// keeps the replicas' forwarding out.
	RequestRate  float64
	RequestBurst int
	// Seen bounds the verdict IDs remembered to act on each once.
	Seen    int
	Clock   clock.Clock
	Logger  *slog.Logger
	Metrics *Metrics
}

// Receiver is the leader's forwarding endpoint, an http.Handler.
type Receiver struct {
	o       ReceiverOptions
	limiter *rate.Limiter
	// seen holds the IDs accepted. allowed holds the tokens reviewed
	// lately that authenticated the Allowed user, others the rest, with
	// the user (or ""), both by sha256: apart, so that a flood of other
	// tokens never evicts the replicas' own.
	seen       *lru.Cache
	allowed    *utilcache.LRUExpireCache
	others     *utilcache.LRUExpireCache
	refusedLog *rate.Limiter
}

// NewReceiver returns the endpoint.
func NewReceiver(o ReceiverOptions) (*Receiver, error) {
	if o.Tokens == nil || o.Rules == nil || o.Local == nil {
		return nil, errors.New("forward receiver: tokens, rules and the local engine are needed")
	}
	if !strings.HasPrefix(o.Allowed, "system:serviceaccount:") {
		return nil, fmt.Errorf("forward receiver: %q is not a ServiceAccount user", o.Allowed)
	}
	if o.RequestRate <= 0 {
		o.RequestRate = DefaultRequestRate
	}
	if o.RequestBurst <= 0 {
		o.RequestBurst = DefaultRequestBurst
	}
	if o.Seen <= 0 {
		o.Seen = DefaultSeen
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return &Receiver{
		o: o, limiter: rate.NewLimiter(rate.Limit(o.RequestRate), o.RequestBurst),
		seen:       lru.New(o.Seen),
		allowed:    utilcache.NewLRUExpireCacheWithClock(identities, o.Clock),
		others:     utilcache.NewLRUExpireCacheWithClock(identities, o.Clock),
		refusedLog: rate.NewLimiter(1, 1),
	}, nil
}

// ServeHTTP implements http.Handler.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rc.refuse(w, r, http.StatusMethodNotAllowed, RefusedInvalid, "POST only")
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" || len(token) > MaxTokenBytes {
		rc.refuse(w, r, http.StatusUnauthorized, RefusedUnauthenticated, fmt.Sprintf("a bearer token of at most %d bytes is needed", MaxTokenBytes))
		return
	}
	user, err := rc.authenticate(r.Context(), token)
	switch {
	case errors.Is(err, errRateLimited):
		rc.refuse(w, r, http.StatusTooManyRequests, RefusedRateLimited, "too many requests")
		return
	case err != nil:
		rc.refuse(w, r, http.StatusServiceUnavailable, RefusedReviewFailed, "the token could not be reviewed")
		return
	case user == "":
		rc.refuse(w, r, http.StatusUnauthorized, RefusedUnauthenticated, "the token is not valid")
		return
	case user != rc.o.Allowed:
		rc.refuse(w, r, http.StatusForbidden, RefusedForbidden, "only Portal's ServiceAccount may forward verdicts")
		return
	}
	// After authentication, so an anonymous caller learns nothing of who
	// leads; the sender retries a 503 and reaches the new leader.
	if !rc.o.Local.Leading() {
		rc.refuse(w, r, http.StatusServiceUnavailable, RefusedNotLeader, "this replica does not lead")
		return
	}
	var b Batch
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err := dec.Decode(&b); err != nil || len(b.Verdicts) > MaxBatch {
		rc.refuse(w, r, http.StatusBadRequest, RefusedInvalid, fmt.Sprintf("want a batch of at most %d verdicts in %d bytes", MaxBatch, MaxBodyBytes))
		return
	}
	n := 0
	for i := range b.Verdicts {
		if rc.take(&b.Verdicts[i]) {
			n++
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"accepted":%d}`+"\n", n)
}

// take hands one verdict to the actions, once per ID; it reports whether
// the verdict was queued.
func (rc *Receiver) take(v *Verdict) bool {
	result := ReceivedAccepted
	defer func() { rc.o.Metrics.Received.WithLabelValues(result).Inc() }()
	if v.ID == "" || len(v.ID) > 64 {
		result = ReceivedUnknownRule
		return false
	}
	if _, ok := rc.seen.Get(v.ID); ok {
		result = ReceivedDuplicate
		return false
	}
	mode := v.Mode
	if mode == "" {
		mode = core.ModeAdmission
	}
	r := rc.o.Rules(v.Rule)
	if r == nil || (mode != core.ModeAdmission && mode != core.ModeRuntime) ||
		!(core.Result{Rule: r, Outcome: core.OutcomeFail}).WantsVerdictIn(mode) {
		result = ReceivedUnknownRule
		return false
	}
	if r.Namespace != "" && r.Namespace != v.Resource.Namespace {
		result = ReceivedOutOfNamespace
		return false
	}
	if !rc.o.Local.Accept(decode(v, r)) {
		result = ReceivedDropped
		return false
	}
	rc.seen.Add(v.ID, struct{}{})
	return true
}

// errRateLimited: a token not reviewed lately found the reviews' rate spent.
var errRateLimited = errors.New("token reviews rate-limited")

// authenticate returns the user token authenticates, "" when none. Only a
// token not reviewed lately spends the rate, so a flood slows other
// callers' first requests, never the replicas' own once reviewed.
func (rc *Receiver) authenticate(ctx context.Context, token string) (string, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if _, ok := rc.allowed.Get(key); ok {
		return rc.o.Allowed, nil
	}
	if u, ok := rc.others.Get(key); ok {
		return u.(string), nil
	}
	if !rc.limiter.Allow() {
		return "", errRateLimited
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := rc.o.Tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token review: %w", err)
	}
	user := ""
	if tr.Status.Authenticated {
		user = tr.Status.User.Username
	}
	if user == rc.o.Allowed {
		rc.allowed.Add(key, user, identityTTL)
	} else {
		rc.others.Add(key, user, identityTTL)
	}
	return user, nil
}

func (rc *Receiver) refuse(w http.ResponseWriter, r *http.Request, code int, reason, msg string) {
	rc.o.Metrics.Refused.WithLabelValues(reason).Inc()
	if rc.refusedLog.Allow() {
		rc.o.Logger.Warn("forwarded verdicts refused", "reason", reason, "remote", r.RemoteAddr)
	}
	http.Error(w, msg, code)
}
