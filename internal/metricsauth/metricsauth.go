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
// reviewed, tokens longer than MaxTokenBytes are not, and the reviews are
// kubereview's (bounded caches and slots; a failed review is not retried,
// the next scrape asks again, where the filter retried for up to 10
// seconds).
package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	authorizationv1 "k8s.io/api/authorization/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vilaca/portal/internal/bearer"
	"github.com/vilaca/portal/internal/kubereview"
)

// Options tune a Guard: kubereview's, whose defaults are
// controller-runtime's lifetimes (a token trusted for 1 minute,
// authorizations kept 5 minutes, refusals 30 seconds).
type Options = kubereview.Options

// Defaults of Options, and the longest token reviewed.
const (
	DefaultTokenTTL = kubereview.DefaultTokenTTL
	DefaultAllowTTL = kubereview.DefaultAllowTTL
	DefaultDenyTTL  = kubereview.DefaultDenyTTL
	DefaultSlotWait = kubereview.DefaultSlotWait
	// MaxTokenBytes: a longer bearer token is refused without a review. A
	// ServiceAccount token is about 1 KiB and an OIDC token a few; the
	// header itself may be 1 MiB, which would otherwise go to the API
	// server in each review.
	MaxTokenBytes = 16 << 10
)

// Guard authenticates and authorizes requests with the API server.
type Guard struct {
	reviews *kubereview.Reviewer
	// errLog lets one failed review a minute be logged as an error; the
	// rest go to the debug log, so a throttled API server does not flood
	// the log one line a request.
	errLog *rate.Limiter
}

// New returns a Guard that reviews with tokens and access.
func New(tokens kubereview.TokenReviewer, access kubereview.AccessReviewer, opts Options) *Guard {
	return &Guard{
		reviews: kubereview.New(tokens, access, opts),
		errLog:  rate.NewLimiter(rate.Every(time.Minute), 1),
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
	user, why, err := g.reviews.Authenticate(ctx, token)
	switch {
	case errors.Is(err, kubereview.ErrBusy):
		return answer{code: http.StatusServiceUnavailable, msg: "metrics: too many token reviews in flight, retry"}
	case err != nil:
		return answer{code: http.StatusServiceUnavailable, msg: "metrics: the API server could not review the token", err: err}
	case user == nil:
		return answer{code: http.StatusUnauthorized, msg: "metrics: the API server did not authenticate the token", why: why}
	}
	spec := kubereview.Subject(user)
	spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: r.URL.Path, Verb: "get"}
	allowed, why, err := g.reviews.Authorize(ctx, spec)
	switch {
	case errors.Is(err, kubereview.ErrBusy):
		return answer{code: http.StatusServiceUnavailable, msg: "metrics: too many access reviews in flight, retry"}
	case err != nil:
		return answer{code: http.StatusServiceUnavailable, msg: "metrics: the API server could not review the access", err: err}
	case !allowed:
		return answer{code: http.StatusForbidden, why: why,
			msg: fmt.Sprintf("metrics: %s may not get %s: bind it to a ClusterRole with nonResourceURLs [%s] and verbs [get]", user.Username, r.URL.Path, r.URL.Path)}
	}
	return answer{code: http.StatusOK}
}
