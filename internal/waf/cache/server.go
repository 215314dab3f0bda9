package cache

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/bearer"
)

// Defaults of ServerOptions, as in the Coraza Kubernetes Operator.
const (
	DefaultAddr       = ":18080"
	DefaultMaxAge     = 24 * time.Hour
	DefaultMaxSize    = 100 * 1024 * 1024
	DefaultGCInterval = 5 * time.Minute
	// DefaultMaxConcurrent bounds the requests answered at once; more get
	// 503 with Retry-After.
	DefaultMaxConcurrent = 64
	// maxTokenBytes bounds the bearer token looked at (a ServiceAccount
	// token is about 1 KiB).
	maxTokenBytes = 8 << 10
	// Refusals are logged up to a burst of denyLogBurst, then one every
	// denyLogEvery: ten lines a second in a flood.
	denyLogEvery = 100 * time.Millisecond
	denyLogBurst = 20
)

// Limits of the HTTP server.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 15 * time.Second
	WriteTimeout      = 15 * time.Second
	IdleTimeout       = 60 * time.Second
	MaxHeaderBytes    = 16 * 1024
	shutdownTimeout   = 10 * time.Second
)

// ServerOptions configure a Server.
type ServerOptions struct {
	// Addr is the listen address (DefaultAddr when empty).
	Addr string
	// MaxAge, MaxSize and GCInterval drive the garbage collector: every
	// GCInterval, revisions that are not the latest of their rule set are
	// evicted when older than MaxAge, then oldest first while the cache holds
	// more than MaxSize bytes. Zero means the default; a negative MaxAge or
	// MaxSize disables that limit.
	MaxAge     time.Duration
	MaxSize    int64
	GCInterval time.Duration
	// Authorizer decides who reads which rule set; without one every
	// request is refused.
	Authorizer Authorizer
	// GetCertificate returns the serving certificate for each TLS
	// handshake (certs.Controller.GetCertificate, so a renewed certificate
	// is served without a restart). Start refuses to serve without it.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// MaxConcurrent bounds the requests answered at once
	// (DefaultMaxConcurrent when <= 0).
	MaxConcurrent int
	// Logger receives the server's logs (slog.Default() when nil).
	Logger *slog.Logger
	// Clock drives the garbage collector's ticker (the real clock when nil).
	Clock clock.WithTicker
}

func (o ServerOptions) withDefaults() ServerOptions {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxAge == 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.GCInterval <= 0 {
		o.GCInterval = DefaultGCInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Server serves a Cache over HTTP and garbage-collects it. It is a
// controller-runtime manager.Runnable that runs on every replica.
type Server struct {
	cache   *Cache
	opts    ServerOptions
	metrics *Metrics

	// slots holds a token per request being answered.
	slots chan struct{}
	// denyLog limits the refusals logged; notLogged counts the others
	// since the last line.
	denyLog   *rate.Limiter
	notLogged atomic.Int64

	ready   chan struct{}
	mu      sync.Mutex
	boundTo string
}

// NewServer returns a server for c; m may be nil.
func NewServer(c *Cache, opts ServerOptions, m *Metrics) *Server {
	opts = opts.withDefaults()
	return &Server{
		cache: c, opts: opts, metrics: m, slots: make(chan struct{}, opts.MaxConcurrent), ready: make(chan struct{}),
		denyLog: rate.NewLimiter(rate.Every(denyLogEvery), denyLogBurst),
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica serves its own cache.
func (s *Server) NeedLeaderElection() bool { return false }

// Ready is closed once Start listens (or failed to).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address Start listens on, once Ready is closed.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boundTo
}

// Start listens on the configured address, serves TLS (1.2 at least) until
// ctx ends, then shuts down gracefully. It runs the garbage collector
// meanwhile.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.GetCertificate == nil {
		close(s.ready)
		return errors.New("rule set cache: no serving certificate configured (ServerOptions.GetCertificate)")
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	s.mu.Lock()
	if err == nil {
		s.boundTo = ln.Addr().String()
	}
	s.mu.Unlock()
	close(s.ready)
	if err != nil {
		return fmt.Errorf("rule set cache: listen on %s: %w", s.opts.Addr, err)
	}
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.opts.GetCertificate},
	}
	go s.collect(ctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	s.opts.Logger.Info("rule set cache serving", "addr", s.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("rule set cache: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("rule set cache: %w", err)
	}
	return nil
}

// collect runs the garbage collector every GCInterval until ctx ends.
func (s *Server) collect(ctx context.Context) {
	t := s.opts.Clock.NewTicker(s.opts.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			s.GC()
		}
	}
}

// GC runs one garbage collection with the server's limits.
func (s *Server) GC() {
	maxAge, maxSize := max(s.opts.MaxAge, 0), max(s.opts.MaxSize, 0)
	byAge, bySize := s.cache.GC(maxAge, maxSize)
	entries, bytes := s.cache.Stats()
	if byAge+bySize > 0 {
		s.opts.Logger.Info("rule set cache collected", "evictedByAge", byAge, "evictedBySize", bySize, "entries", entries, "bytes", bytes)
	}
	if maxSize > 0 && bytes > maxSize {
		s.opts.Logger.Warn("rule set cache above its size limit with only latest revisions left", "bytes", bytes, "maxSize", maxSize)
	}
}

// Handler serves GET /rules/{namespace}/{name},
// GET /rules/{namespace}/{name}/latest, and the route tables of Gateways,
// GET /tables/{namespace}/{gateway} and GET /tables/{namespace}/{gateway}/latest,
// with the same authorization: a ServiceAccount token of the namespace, or
// RBAC's get on rulesets/cache there.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		s.serve(rec, r)
		// A request answered nothing (its client hung up) is not counted:
		// counting it as Go's implicit 200 would let anyone raise the
		// successes by hanging up.
		if s.metrics != nil && rec.code != 0 {
			s.metrics.Requests.WithLabelValues(strconv.Itoa(rec.code)).Inc()
			s.metrics.Duration.Observe(time.Since(start).Seconds())
		}
	})
}

// serve answers one request. The order of the checks is the defence: cheap
// refusals first, authorization before the lookup, and a slot only for an
// authorized request: the Authorizer bounds its own reviews, so callers
// whose reviews are slow or forged never hold the slots that known data
// planes are answered on.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	tablePath, ok := checkRequest(w, r)
	if !ok {
		return
	}
	token, ok := bearerToken(r)
	if !ok {
		s.deny(w, r, DenyNoToken, "")
		return
	}
	ns, name, latest, ok := parseRequestPath(w, r, tablePath)
	if !ok {
		return
	}
	if !s.allowed(w, r, token, ns, name, tablePath) {
		return
	}
	select {
	case s.slots <- struct{}{}:
		defer func() { <-s.slots }()
	default:
		s.deny(w, r, DenyOverloaded, "")
		return
	}
	data, ok := s.entry(w, ns, name, latest, tablePath)
	if !ok {
		return
	}
	writeEntry(w, r, data)
}

// checkRequest refuses, without taking a slot, a request the cache never
// serves: another path, another method, or a body. It reports whether the
// path is a route table's.
func checkRequest(w http.ResponseWriter, r *http.Request) (tablePath, ok bool) {
	tablePath = r.URL.Path == "/tables" || strings.HasPrefix(r.URL.Path, "/tables/")
	if !tablePath && r.URL.Path != "/rules" && !strings.HasPrefix(r.URL.Path, "/rules/") {
		http.NotFound(w, r)
		return false, false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return false, false
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		http.Error(w, "request body not accepted", http.StatusRequestEntityTooLarge)
		return false, false
	}
	return tablePath, true
}

// parseRequestPath reads the namespace and name of a rule set (or Gateway)
// from the path, answering 400 when it is malformed.
func parseRequestPath(w http.ResponseWriter, r *http.Request, tablePath bool) (ns, name string, latest, ok bool) {
	if r.URL.RawPath != "" {
		http.Error(w, "malformed path: escaped characters", http.StatusBadRequest)
		return "", "", false, false
	}
	parse := ParsePath
	if tablePath {
		parse = ParseTablePath
	}
	ns, name, latest, err := parse(r.URL.Path)
	if err != nil {
		http.Error(w, "malformed path: "+err.Error(), http.StatusBadRequest)
		return "", "", false, false
	}
	return ns, name, latest, true
}

// allowed checks the caller's token for ns/name, answering the refusal
// itself. Authorization comes before the lookup, so a refused caller cannot
// tell which rule sets or tables exist.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request, token, ns, name string, tablePath bool) bool {
	d, err := s.authorize(r.Context(), token, ns, name)
	if r.Context().Err() != nil {
		// The client hung up: nobody reads the answer, and its cancelled
		// review is no fault of the API server's.
		return false
	}
	if err != nil {
		s.deny(w, r, DenyReviewFailed, "", "error", err.Error())
		return false
	}
	if !d.Allowed && d.Reason == DenyForbidden && !tablePath {
		// A Gateway's data plane reads the rule sets its table runs, also
		// in other namespaces: the policy that put them there was allowed
		// to reference them (ReferenceGrant), and the grant's removal takes
		// them out of the table and so out of reach.
		if caller, _, ok := ServiceAccount(d.User); ok && s.cache.ReferencedFrom(caller, Key(ns, name)) {
			d.Allowed = true
		}
	}
	if !d.Allowed {
		s.deny(w, r, d.Reason, d.User)
		return false
	}
	return true
}

// entry returns the body of the rule set or route table ns/name (its latest
// revision only, when latest), answering 404 when there is none.
func (s *Server) entry(w http.ResponseWriter, ns, name string, latest, tablePath bool) ([]byte, bool) {
	if tablePath {
		t := s.cache.table(Key(ns, name))
		if t == nil {
			http.Error(w, "route table not found", http.StatusNotFound)
			return nil, false
		}
		if latest {
			return t.latest, true
		}
		return t.body, true
	}
	rev := s.cache.latest(Key(ns, name))
	if rev == nil {
		http.Error(w, "rule set not found", http.StatusNotFound)
		return nil, false
	}
	if latest {
		return rev.latest, true
	}
	return rev.body, true
}

// writeEntry answers 200 with data, which no intermediary may keep.
func writeEntry(w http.ResponseWriter, r *http.Request, data []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(data)
	}
}

func (s *Server) authorize(ctx context.Context, token, ns, name string) (Decision, error) {
	if s.opts.Authorizer == nil {
		return Decision{}, errNoAuthorizer
	}
	return s.opts.Authorizer.Authorize(ctx, token, ns, name)
}

// deny answers a refused request, counts it and logs it unless refusals
// come faster than denyLogEvery (after a burst of denyLogBurst): anyone
// who can reach the port can make refusals, and a line each would let them
// fill the log at the rate they send. Each refusal is counted; the next
// line logged says how many were not.
// attrs are more of the line's key-value pairs: the error of a failed
// review, which is logged as a warning.
func (s *Server) deny(w http.ResponseWriter, r *http.Request, reason, user string, attrs ...any) {
	s.metrics.denied(reason)
	if s.denyLog.AllowN(s.opts.Clock.Now(), 1) {
		level := slog.LevelInfo
		if reason == DenyReviewFailed {
			level = slog.LevelWarn
		}
		s.opts.Logger.Log(r.Context(), level, "rule set cache request denied", append([]any{"reason", reason, "path", r.URL.Path, "client", r.RemoteAddr, "user", user,
			"notLogged", s.notLogged.Swap(0)}, attrs...)...)
	} else {
		s.notLogged.Add(1)
	}
	switch reason {
	case DenyNoToken, DenyUnauthenticated:
		w.Header().Set("WWW-Authenticate", `Bearer realm="portal-waf-cache"`)
		http.Error(w, "a ServiceAccount token for audience "+Audience+" is required", http.StatusUnauthorized)
	case DenyForbidden:
		http.Error(w, "this ServiceAccount may not read this rule set: grant get on rulesets/cache of waf.portal.io in its namespace", http.StatusForbidden)
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "rule set cache busy or unable to check the token; retry", http.StatusServiceUnavailable)
	}
}

// bearerToken reads "Authorization: Bearer <token>".
func bearerToken(r *http.Request) (string, bool) {
	return bearer.Token(r.Header.Get("Authorization"), maxTokenBytes)
}

// ParsePath reads /rules/{namespace}/{name}[/latest]. The namespace must be
// a DNS-1123 label and the name a DNS-1123 subdomain, as Kubernetes requires,
// or a bundle's name (BundleName).
func ParsePath(p string) (namespace, name string, latest bool, err error) {
	return parsePath(p, "rules")
}

// ParseTablePath reads /tables/{namespace}/{gateway}[/latest], with the
// rules of ParsePath.
func ParseTablePath(p string) (namespace, gateway string, latest bool, err error) {
	return parsePath(p, "tables")
}

func parsePath(p, prefix string) (namespace, name string, latest bool, err error) {
	want := "want /" + prefix + "/{namespace}/{name}[/latest]"
	rest, ok := strings.CutPrefix(p, "/"+prefix+"/")
	if !ok {
		return "", "", false, errors.New(want)
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 3 && parts[2] == "latest":
		latest = true
	case len(parts) != 2:
		return "", "", false, errors.New(want)
	}
	namespace, name = parts[0], parts[1]
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", "", false, fmt.Errorf("namespace %q: %s", namespace, errs[0])
	}
	if prefix == "rules" && isBundleName(name) {
		return namespace, name, latest, nil
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", false, fmt.Errorf("name %q: %s", name, errs[0])
	}
	return namespace, name, latest, nil
}

// statusRecorder remembers the status code written (0 while none is).
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}
