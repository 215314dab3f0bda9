package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	// ClientCAFile, when set, verifies client certificates: the API
	// server's audit webhook client certificate, Falco's mTLS one. It is
	// read again when it changes.
	ClientCAFile string
	// AuditNames and FalcoNames are the client identities (subject CN, DNS
	// or URI SAN) a verified certificate must bear to post to each path;
	// nil: DefaultAuditNames(), DefaultFalcoNames(). A certificate the CA
	// signed for anyone else is refused with 403.
	AuditNames, FalcoNames []string
	// AuditToken and FalcoToken, when set, accept a request to their path
	// bearing "Authorization: Bearer TOKEN". A request passes with an
	// allowed client certificate or the path's token; without either
	// configured, the path refuses everything.
	AuditToken, FalcoToken string
	// MaxBodyBytes bounds one request's body; MaxBatch the events of one
	// EventList.
	MaxBodyBytes int64
	MaxBatch     int
	// RequestRate and RequestBurst bound the requests per second each
	// path serves, each path on its own, so a Falco flood does not starve
	// the API server's batches; beyond them it answers 429 at once, so the
	// API server's webhook backend retries later.
	RequestRate  float64
	RequestBurst int
	Logger       *slog.Logger
}

// path is one input of the endpoint, with its own credentials and rate.
type path struct {
	input   string
	token   string
	names   map[string]bool
	limiter *rate.Limiter
	limit   int64
	decode  func([]byte) (int, error)
}

// Server is the runtime endpoint. It implements manager.Runnable and runs
// on the leader only (see docs/concepts/runtime.md: the endpoint of a
// replica that does not lead is closed, and the API server retries the
// batch, which reaches the leader).
type Server struct {
	o     ServerOptions
	src   *Source
	m     *Metrics
	ca    *clientCA
	audit *path
	falco *path
	// refusedLog bounds the log lines about refused identities.
	refusedLog *rate.Limiter
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
	if o.AuditNames == nil {
		o.AuditNames = DefaultAuditNames()
	}
	if o.FalcoNames == nil {
		o.FalcoNames = DefaultFalcoNames()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	for _, names := range [][]string{o.AuditNames, o.FalcoNames} {
		if err := CheckAllowedNames(names); err != nil {
			return nil, fmt.Errorf("runtime endpoint client names: %w", err)
		}
	}
	s := &Server{o: o, src: src, m: m, refusedLog: rate.NewLimiter(1, 1)}
	s.audit = s.newPath(InputWebhook, o.AuditToken, o.AuditNames, o.MaxBodyBytes, s.decodeAudit)
	s.falco = s.newPath(InputFalco, o.FalcoToken, o.FalcoNames, min(o.MaxBodyBytes, DefaultFalcoBodySize), s.decodeFalco)
	if o.ClientCAFile != "" {
		ca, err := loadClientCA(o.ClientCAFile, o.Logger)
		if err != nil {
			return nil, err
		}
		s.ca = ca
	}
	if s.ca == nil && o.AuditToken == "" && o.FalcoToken == "" {
		return nil, errors.New("the runtime endpoint accepts no one: set a client CA or a token")
	}
	return s, nil
}

func (s *Server) newPath(input, token string, names []string, limit int64, decode func([]byte) (int, error)) *path {
	p := &path{input: input, token: token, names: map[string]bool{}, limit: limit, decode: decode,
		limiter: rate.NewLimiter(rate.Limit(s.o.RequestRate), s.o.RequestBurst)}
	for _, n := range names {
		p.names[n] = true
	}
	return p
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (*Server) NeedLeaderElection() bool { return true }

// Handler serves both paths; exported for tests that bring their own
// listener.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathAudit, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, s.audit) })
	mux.HandleFunc("POST "+PathFalco, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, s.falco) })
	return mux
}

// TLSConfig is the endpoint's TLS configuration around getCert.
func (s *Server) TLSConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert, NextProtos: []string{"http/1.1"}}
	if s.ca != nil {
		// Requested, and verified per request against the client CA as it
		// is now (it is reloaded when its file changes); a caller without
		// one may still pass with the token.
		c.ClientAuth = tls.RequestClientCert
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
		ConnContext: withConnAuth,
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
func (s *Server) serve(w http.ResponseWriter, r *http.Request, p *path) {
	code := http.StatusOK
	defer func() { s.m.Requests.WithLabelValues(p.input, strconv.Itoa(code)).Inc() }()
	if refused, names := s.authorize(r, p); refused != 0 {
		code = refused
		s.refused(p, code, names)
		http.Error(w, strings.ToLower(http.StatusText(code)), code)
		return
	}
	if !p.limiter.Allow() {
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many requests", code)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.limit))
	if err != nil {
		code = http.StatusRequestEntityTooLarge
		var mbe *http.MaxBytesError
		if !errors.As(err, &mbe) {
			code = http.StatusBadRequest
		}
		http.Error(w, "body too large or unreadable", code)
		return
	}
	if _, err := p.decode(body); err != nil {
		s.m.Dropped.WithLabelValues(p.input, DropDecode).Inc()
		code = http.StatusBadRequest
		http.Error(w, refusal(err), code)
		return
	}
	w.WriteHeader(code)
}

// refused counts a refused caller and, at a bounded rate, logs the
// identity a certificate bore, so an operator sees which name to allow.
func (s *Server) refused(p *path, code int, names []string) {
	reason := RefuseCredentials
	if code == http.StatusForbidden {
		reason = RefuseIdentity
	}
	s.m.Refused.WithLabelValues(p.input, reason).Inc()
	if code == http.StatusForbidden && s.refusedLog.Allow() {
		shown := names[:min(len(names), 4)]
		for i, n := range shown {
			if len(n) > 128 {
				shown[i] = n[:128]
			}
		}
		s.o.Logger.Warn("runtime endpoint: client certificate not allowed on this path", "path", p.input, "names", shown)
	}
}

// refusal is the error text a refused body gets back, bounded.
func refusal(err error) string {
	msg := err.Error()
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return msg
}

func (s *Server) decodeAudit(body []byte) (int, error) {
	evs, err := event.DecodeList(body, s.o.MaxBatch)
	if err != nil {
		return 0, err
	}
	for i := range evs {
		s.src.Offer(InputWebhook, evs[i])
	}
	return len(evs), nil
}

func (s *Server) decodeFalco(body []byte) (int, error) {
	ev, err := event.DecodeFalco(body)
	if err != nil {
		return 0, err
	}
	s.src.Offer(InputFalco, ev)
	return 1, nil
}
