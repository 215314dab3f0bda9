package runtime

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"

	"github.com/vilaca/portal/internal/context/event"
)

// Paths of the runtime endpoint.
const (
	PathAudit = "/audit"
	PathFalco = "/falco"
)

// Defaults of ServerOptions.
const (
	DefaultMaxBodyBytes  = 16 << 20
	DefaultMaxBatch      = 5000
	DefaultRequestRate   = 100
	DefaultRequestBurst  = 200
	DefaultFalcoBodySize = 64 << 10
)

// ServerOptions configure the runtime endpoint: HTTPS, where the API
// server's audit webhook backend posts EventList batches (PathAudit) and
// Falco or Falcosidekick post alerts (PathFalco).
type ServerOptions struct {
	// Addr is the listen address (":9444").
	Addr string
	// CertDir holds tls.crt and tls.key, reloaded when they change.
	CertDir string
	// ClientCAFile, when set, accepts a client certificate it signed: the
	// API server's audit webhook client certificate, Falco's mTLS one.
	ClientCAFile string
	// AuditToken and FalcoToken, when set, accept a request to their path
	// bearing "Authorization: Bearer TOKEN". A request passes with a
	// verified client certificate or the path's token; without either
	// configured, the path refuses everything.
	AuditToken, FalcoToken string
	// MaxBodyBytes bounds one request's body; MaxBatch the events of one
	// EventList.
	MaxBodyBytes int64
	MaxBatch     int
	// RequestRate and RequestBurst bound the requests per second the
	// endpoint serves; beyond them it answers 429 at once, so the API
	// server's webhook backend retries later.
	RequestRate  float64
	RequestBurst int
	Logger       *slog.Logger
}

// Server is the runtime endpoint. It implements manager.Runnable and runs
// on the leader only (see docs/concepts/runtime.md: the endpoint of a
// replica that does not lead is closed, and the API server retries the
// batch, which reaches the leader).
type Server struct {
	o       ServerOptions
	src     *Source
	m       *Metrics
	limiter *rate.Limiter
	caPool  *x509.CertPool
}

// NewServer returns the endpoint feeding src.
func NewServer(o ServerOptions, src *Source, m *Metrics) (*Server, error) {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.RequestRate <= 0 {
		o.RequestRate = DefaultRequestRate
	}
	if o.RequestBurst <= 0 {
		o.RequestBurst = DefaultRequestBurst
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Server{o: o, src: src, m: m, limiter: rate.NewLimiter(rate.Limit(o.RequestRate), o.RequestBurst)}
	if o.ClientCAFile != "" {
		pem, err := os.ReadFile(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("runtime client CA: %w", err)
		}
		s.caPool = x509.NewCertPool()
		if !s.caPool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("runtime client CA %s: no PEM certificate", o.ClientCAFile)
		}
	}
	if s.caPool == nil && o.AuditToken == "" && o.FalcoToken == "" {
		return nil, errors.New("the runtime endpoint accepts no one: set a client CA or a token")
	}
	return s, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (*Server) NeedLeaderElection() bool { return true }

// Handler serves both paths; exported for tests that bring their own
// listener.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathAudit, func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, InputWebhook, s.o.AuditToken, s.o.MaxBodyBytes, s.audit)
	})
	mux.HandleFunc("POST "+PathFalco, func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, InputFalco, s.o.FalcoToken, min(s.o.MaxBodyBytes, DefaultFalcoBodySize), s.falco)
	})
	return mux
}

// TLSConfig is the endpoint's TLS configuration around getCert.
func (s *Server) TLSConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert, NextProtos: []string{"http/1.1"}}
	if s.caPool != nil {
		// Verified when presented; a caller without one may still pass
		// with the token.
		c.ClientAuth, c.ClientCAs = tls.VerifyClientCertIfGiven, s.caPool
	}
	return c
}

// Start implements manager.Runnable.
func (s *Server) Start(ctx context.Context) error {
	cw, err := certwatcher.New(s.o.CertDir+"/tls.crt", s.o.CertDir+"/tls.key")
	if err != nil {
		return fmt.Errorf("runtime endpoint certificate: %w", err)
	}
	go func() { _ = cw.Start(ctx) }()
	ln, err := net.Listen("tcp", s.o.Addr)
	if err != nil {
		return fmt.Errorf("runtime endpoint: %w", err)
	}
	srv := &http.Server{
		Handler: s.Handler(), TLSConfig: s.TLSConfig(cw.GetCertificate),
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 90 * time.Second, MaxHeaderBytes: 64 << 10,
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.o.Logger.Info("runtime endpoint serving", "addr", ln.Addr().String())
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("runtime endpoint: %w", err)
	}
	return nil
}

// serve authenticates, rate-limits and bounds one request, then hands the
// body to decode, which queues what it decodes without waiting.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, input, token string, limit int64, decode func([]byte) (int, error)) {
	code := http.StatusOK
	defer func() { s.m.Requests.WithLabelValues(input, strconv.Itoa(code)).Inc() }()
	if !s.authenticated(r, token) {
		code = http.StatusUnauthorized
		http.Error(w, "unauthorized", code)
		return
	}
	if !s.limiter.Allow() {
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many requests", code)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		code = http.StatusRequestEntityTooLarge
		var mbe *http.MaxBytesError
		if !errors.As(err, &mbe) {
			code = http.StatusBadRequest
		}
		http.Error(w, "body too large or unreadable", code)
		return
	}
	if _, err := decode(body); err != nil {
		s.m.Dropped.WithLabelValues(input, DropDecode).Inc()
		code = http.StatusBadRequest
		http.Error(w, refusal(err), code)
		return
	}
	w.WriteHeader(code)
}

// refusal is the error text a refused body gets back, bounded.
func refusal(err error) string {
	msg := err.Error()
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return msg
}

// authenticated accepts a verified client certificate (the TLS handshake
// checked it against the client CA) or the path's bearer token, compared in
// constant time.
func (s *Server) authenticated(r *http.Request, token string) bool {
	if s.caPool != nil && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return true
	}
	if token == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func (s *Server) audit(body []byte) (int, error) {
	evs, err := event.DecodeList(body, s.o.MaxBatch)
	if err != nil {
		return 0, err
	}
	for i := range evs {
		s.src.Offer(InputWebhook, evs[i])
	}
	return len(evs), nil
}

func (s *Server) falco(body []byte) (int, error) {
	ev, err := event.DecodeFalco(body)
	if err != nil {
		return 0, err
	}
	s.src.Offer(InputFalco, ev)
	return 1, nil
}
