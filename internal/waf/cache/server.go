package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
)

// Defaults of ServerOptions, as in the Coraza Kubernetes Operator.
const (
	DefaultAddr       = ":18080"
	DefaultMaxAge     = 24 * time.Hour
	DefaultMaxSize    = 100 * 1024 * 1024
	DefaultGCInterval = 5 * time.Minute
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

	ready   chan struct{}
	mu      sync.Mutex
	boundTo string
}

// NewServer returns a server for c; m may be nil.
func NewServer(c *Cache, opts ServerOptions, m *Metrics) *Server {
	return &Server{cache: c, opts: opts.withDefaults(), metrics: m, ready: make(chan struct{})}
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

// Start listens on the configured address, serves until ctx ends, then shuts
// down gracefully. It runs the garbage collector meanwhile.
func (s *Server) Start(ctx context.Context) error {
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
	}
	go s.collect(ctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
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

// Handler serves GET /rules/{namespace}/{name} and
// GET /rules/{namespace}/{name}/latest.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		s.serve(rec, r)
		if s.metrics != nil {
			s.metrics.Requests.WithLabelValues(strconv.Itoa(rec.code)).Inc()
			s.metrics.Duration.Observe(time.Since(start).Seconds())
		}
	})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/rules" && !strings.HasPrefix(r.URL.Path, "/rules/") {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		http.Error(w, "request body not accepted", http.StatusRequestEntityTooLarge)
		return
	}
	if r.URL.RawPath != "" {
		http.Error(w, "malformed path: escaped characters", http.StatusBadRequest)
		return
	}
	ns, name, latest, err := ParsePath(r.URL.Path)
	if err != nil {
		http.Error(w, "malformed path: "+err.Error(), http.StatusBadRequest)
		return
	}
	e, ok := s.cache.Get(Key(ns, name))
	if !ok {
		http.Error(w, "rule set not found", http.StatusNotFound)
		return
	}
	var body any = e
	if latest {
		body = Latest{UUID: e.UUID, Timestamp: e.Timestamp}
	}
	data, err := json.Marshal(body)
	if err != nil {
		http.Error(w, "encoding failed", http.StatusInternalServerError)
		return
	}
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

// ParsePath reads /rules/{namespace}/{name}[/latest]. The namespace must be
// a DNS-1123 label and the name a DNS-1123 subdomain, as Kubernetes requires.
func ParsePath(p string) (namespace, name string, latest bool, err error) {
	rest, ok := strings.CutPrefix(p, "/rules/")
	if !ok {
		return "", "", false, errors.New("want /rules/{namespace}/{name}[/latest]")
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 3 && parts[2] == "latest":
		latest = true
	case len(parts) != 2:
		return "", "", false, errors.New("want /rules/{namespace}/{name}[/latest]")
	}
	namespace, name = parts[0], parts[1]
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", "", false, fmt.Errorf("namespace %q: %s", namespace, errs[0])
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", false, fmt.Errorf("name %q: %s", name, errs[0])
	}
	return namespace, name, latest, nil
}

// statusRecorder remembers the status code written.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}
