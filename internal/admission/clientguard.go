package admission

import (
	"log/slog"
	"net/http"
	"sync/atomic"

	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// ClientGuard carries --webhook-client-ca-file from the TLS handshake to
// the paths of the webhook server, so one server can serve the API server
// (authenticated by its client certificate) and a path whose callers
// authenticate otherwise (the verdict forwarding endpoint, by a
// ServiceAccount token): a TLS handshake cannot tell which path a caller
// will ask for.
//
// While no open path is registered, the handshake demands the certificate
// as before and the guard only checks what the handshake already did. Once
// one is, the handshake asks for a certificate without demanding it (one
// that is presented is still verified, names included, once per
// connection), and every path registered through Server but the open ones
// refuses, before its handler reads a byte, a request whose connection
// presented none.
type ClientGuard struct {
	open   map[string]bool
	served atomic.Bool // an open path is registered
	m      *ClientCAMetrics
	log    *slog.Logger
	logs   *rate.Limiter
}

// NewClientGuard returns the guard of a webhook server whose paths open
// accept callers without a client certificate; m (nil: not counted) counts
// the refusals, log (nil: slog.Default()) logs some of them.
func NewClientGuard(open []string, m *ClientCAMetrics, log *slog.Logger) *ClientGuard {
	if log == nil {
		log = slog.Default()
	}
	g := &ClientGuard{open: map[string]bool{}, m: m, log: log, logs: rate.NewLimiter(1, 1)}
	for _, p := range open {
		g.open[p] = true
	}
	return g
}

// certificateOptional reports whether the handshake may go without a
// client certificate: only while a path is served that authenticates its
// callers itself. Read when the server starts, after every path is
// registered; a path registered later finds the handshake demanding one.
func (g *ClientGuard) certificateOptional() bool { return g != nil && g.served.Load() }

// Server returns inner with every path registered through it guarded but
// the open ones. Its WebhookMux is nil: a handler added to the mux
// directly would escape the guard, so Register is the only way in and a
// path nobody listed as open requires the certificate.
func (g *ClientGuard) Server(inner webhook.Server) webhook.Server {
	return &guardedServer{Server: inner, g: g}
}

type guardedServer struct {
	webhook.Server
	g *ClientGuard
}

func (s *guardedServer) Register(path string, hook http.Handler) {
	if s.g.open[path] {
		s.g.served.Store(true)
		s.Server.Register(path, hook)
		return
	}
	if s.g.m != nil {
		s.g.m.Refused.WithLabelValues(path)
	}
	s.Server.Register(path, s.g.require(path, hook))
}

func (*guardedServer) WebhookMux() *http.ServeMux { return nil }

// require serves next only to a request whose connection presented a
// certificate the client CA signed: the handshake verified it (chain and
// allowed names), so this reads its result instead of verifying again.
func (g *ClientGuard) require(path string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			next.ServeHTTP(w, r)
			return
		}
		if g.m != nil {
			g.m.Refused.WithLabelValues(path).Inc()
		}
		if g.logs.Allow() {
			g.log.Warn("webhook request without a client certificate refused", "path", path, "remote", r.RemoteAddr)
		}
		// Not kept open for another try: each one costs a handshake.
		w.Header().Set("Connection", "close")
		http.Error(w, "a client certificate signed by the webhook client CA is needed", http.StatusUnauthorized)
	})
}
