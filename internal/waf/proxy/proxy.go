// Package proxy is the waf-proxy data plane: an HTTP reverse proxy in front
// of one upstream that runs every request and response through Coraza with
// the rule set Portal's cache serves.
//
// Proxy is an http.Handler shaped like httputil.ReverseProxy: a struct whose
// fields are its settings and hooks. Load compiles a rule set revision with
// the same sandboxed compiler the RuleSet controller uses and swaps it in
// atomically; requests already running finish on the WAF they started with,
// which is closed when the last of them is done. Poller keeps a Proxy on the
// latest revision of one RuleSet in the cache.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corazawaf/coraza/v3"
	"github.com/corazawaf/coraza/v3/experimental"
	"github.com/corazawaf/coraza/v3/types"

	"github.com/vilaca/portal/internal/waf/ruleset"
)

// Revision is one revision of a rule set, as the cache serves it.
type Revision struct {
	// UUID identifies the revision (the cache's uuid).
	UUID string
	// Timestamp is when the cache stored it.
	Timestamp time.Time
	// Bundle is the rules and data files.
	Bundle ruleset.Bundle
}

// DefaultMaxRequestBodyBytes is the hard cap on a request body when
// Proxy.MaxRequestBodyBytes is not set.
const DefaultMaxRequestBodyBytes = 32 << 20

// DefaultMaxResponseBodyBytes is the most of a response the WAF buffers
// when Proxy.MaxResponseBodyBytes is not set: twice the Core Rule Set's
// recommended SecResponseBodyLimit (512 KiB), so rule sets written for it
// keep their limit.
const DefaultMaxResponseBodyBytes = 1 << 20

// Proxy is a reverse proxy guarded by a WAF. Set Upstream, then serve it;
// until Load has succeeded once, FailOpen decides what happens to requests.
// Change the fields before the first request only.
type Proxy struct {
	// Upstream is where requests the WAF lets through are sent: scheme,
	// host and an optional path prefix, as httputil.ProxyRequest.SetURL
	// takes it. Required.
	Upstream *url.URL

	// Rewrite, when set, adjusts the outbound request after the default
	// rewrite (SetURL(Upstream) and SetXForwarded), like
	// httputil.ReverseProxy.Rewrite.
	Rewrite func(*httputil.ProxyRequest)

	// Transport carries requests to Upstream (nil: a copy of
	// http.DefaultTransport that keeps up to 1024 idle connections).
	Transport http.RoundTripper

	// FailOpen lets requests through uninspected while no rule set has
	// loaded. False (the default) answers them 503 Service Unavailable.
	FailOpen bool

	// RequestBodyLimit and ResponseBodyLimit, when positive, override the
	// rule set's SecRequestBodyLimit and SecResponseBodyLimit: the most
	// bytes of a body the WAF buffers and inspects. What happens beyond
	// them is the rule set's Sec*BodyLimitAction (Reject: 413 or 500,
	// ProcessPartial: the rest passes uninspected). ResponseBodyLimit
	// cannot exceed MaxResponseBodyBytes.
	RequestBodyLimit  int64
	ResponseBodyLimit int64

	// MaxRequestBodyBytes is a hard cap on a request body, whatever the
	// rule set says (DefaultMaxRequestBodyBytes when <= 0): a body
	// announced larger is answered 413 before the WAF runs, and one that
	// grows larger while read (chunked) fails with 413 too, so neither the
	// WAF's buffer nor the upstream ever gets more. SecRequestBodyLimit,
	// SecRequestBodyInMemoryLimit and ctl:requestBodyLimit cannot raise it,
	// so it also bounds what a rule set can make the proxy hold in memory
	// for one request.
	MaxRequestBodyBytes int64

	// MaxResponseBodyBytes is a hard cap on how much of one response the
	// WAF buffers, whatever the rule set says (DefaultMaxResponseBodyBytes
	// when <= 0). SecResponseBodyLimit is clamped to it when the rule set is
	// compiled (ruleset.Options.MaxResponseBodyBytes), ResponseBodyLimit
	// too, and the proxy never feeds the WAF more of a body even when
	// ctl:responseBodyLimit raised a transaction's limit. Unlike the request
	// cap it does not refuse larger responses: past it the rule set's
	// SecResponseBodyLimitAction decides (Reject answers 500,
	// ProcessPartial inspects the first part and streams the rest), so a
	// download larger than the cap passes with ProcessPartial while the
	// proxy's memory stays bounded either way.
	MaxResponseBodyBytes int64

	// Logger receives the matched-rule log lines and the proxy's own logs
	// (slog.Default() when nil).
	Logger *slog.Logger

	// Metrics, when set, records requests, blocks and loads.
	Metrics *Metrics

	// Blocked, when set, writes the answer to a request the WAF interrupted
	// with deny or redirect, in place of WriteBlocked.
	Blocked func(w http.ResponseWriter, r *http.Request, it *types.Interruption, txID string)

	initOnce sync.Once
	rp       *httputil.ReverseProxy
	bufs     buffers
	log      *slog.Logger

	loadMu sync.Mutex // serializes Load and Close
	cur    atomic.Pointer[generation]
	// txAttrs holds the log attributes of the running transactions, by
	// transaction id (see trackTx).
	txAttrs sync.Map
}

// generation is one compiled revision and the requests using it. refs
// counts them plus one for being current; the WAF is closed when refs drops
// to zero, which can only happen once it is no longer current, so a request
// never gets a closed WAF.
type generation struct {
	rev      Revision
	compiled *ruleset.Compiled
	waf      experimental.WAFWithOptions
	refs     atomic.Int64
}

func (g *generation) acquire() bool {
	for {
		n := g.refs.Load()
		if n == 0 {
			return false
		}
		if g.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (g *generation) release(log *slog.Logger) {
	if g.refs.Add(-1) == 0 {
		if err := g.compiled.Close(); err != nil {
			log.Warn("close retired WAF", "uuid", g.rev.UUID, "error", err)
		}
	}
}

func (p *Proxy) init() {
	p.initOnce.Do(func() {
		p.log = p.Logger
		if p.log == nil {
			p.log = slog.Default()
		}
		transport := p.Transport
		if transport == nil {
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.MaxIdleConns = 1024
			t.MaxIdleConnsPerHost = 1024
			transport = t
		}
		p.rp = &httputil.ReverseProxy{
			Rewrite:        p.rewrite,
			Transport:      transport,
			ModifyResponse: p.inspectResponse,
			ErrorHandler:   p.proxyError,
			ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
			BufferPool:     &p.bufs,
		}
	})
}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.Upstream)
	pr.SetXForwarded()
	if p.Rewrite != nil {
		p.Rewrite(pr)
	}
}

// Load compiles rev in the sandbox (ruleset.Compile) and makes it the rule
// set every new request runs through. On error the rule set in force, if
// any, stays. The previous WAF is closed once the requests using it finish.
func (p *Proxy) Load(rev Revision) error {
	p.init()
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	compiled, err := ruleset.Compile(rev.Bundle, ruleset.Options{Configure: p.configure, MaxResponseBodyBytes: p.maxResponseBody()})
	if err != nil {
		return fmt.Errorf("compile rule set revision %s: %w", rev.UUID, err)
	}
	w, ok := compiled.WAF.(experimental.WAFWithOptions)
	if !ok {
		_ = compiled.Close()
		return errors.New("the Coraza WAF does not support transactions with options")
	}
	if rev.Timestamp.IsZero() {
		rev.Timestamp = time.Now()
	}
	g := &generation{rev: rev, compiled: compiled, waf: w}
	g.refs.Store(1)
	if old := p.cur.Swap(g); old != nil {
		old.release(p.log)
	}
	p.Metrics.loaded(rev.UUID, rev.Timestamp)
	return nil
}

// configure adds the proxy's settings to the WAF configuration.
func (p *Proxy) configure(cfg coraza.WAFConfig) coraza.WAFConfig {
	cfg = cfg.WithErrorCallback(p.logMatch)
	if p.RequestBodyLimit > 0 {
		cfg = cfg.WithRequestBodyLimit(clampInt(p.RequestBodyLimit))
	}
	if p.ResponseBodyLimit > 0 {
		cfg = cfg.WithResponseBodyLimit(clampInt(min(p.ResponseBodyLimit, p.maxResponseBody())))
	}
	return cfg
}

// maxBody is the hard cap on a request body.
func (p *Proxy) maxBody() int64 {
	if p.MaxRequestBodyBytes > 0 {
		return p.MaxRequestBodyBytes
	}
	return DefaultMaxRequestBodyBytes
}

// maxResponseBody is the hard cap on the part of a response the WAF buffers.
func (p *Proxy) maxResponseBody() int64 {
	if p.MaxResponseBodyBytes > 0 {
		return p.MaxResponseBodyBytes
	}
	return DefaultMaxResponseBodyBytes
}

func clampInt(n int64) int {
	const maxInt = int64(^uint(0) >> 1)
	return int(min(n, maxInt))
}

// Current returns the revision in force; ok is false before the first
// successful Load.
func (p *Proxy) Current() (rev Revision, ok bool) {
	g := p.cur.Load()
	if g == nil {
		return Revision{}, false
	}
	return g.rev, true
}

// Close unloads the rule set: the WAF is closed once the requests using it
// finish, and later requests are handled as before the first Load.
func (p *Proxy) Close() {
	p.init()
	p.loadMu.Lock()
	defer p.loadMu.Unlock()
	if old := p.cur.Swap(nil); old != nil {
		old.release(p.log)
	}
	p.Metrics.unloaded()
}

// acquire returns the current generation with a reference taken, or nil
// when none is loaded. A generation swapped out between the load and the
// reference may already be closed; the loop then takes the new one.
func (p *Proxy) acquire() *generation {
	for {
		g := p.cur.Load()
		if g == nil || g.acquire() {
			return g
		}
	}
}

// ServeHTTP runs the request through the WAF and, unless a rule interrupts
// it, proxies it to Upstream, inspecting the response as the rules ask.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.init()
	sw := &statusWriter{ResponseWriter: w}
	defer func() { p.Metrics.request(sw.code()) }()
	// The cap holds before any rule runs, for every path below: rules can
	// neither raise it nor switch the engine off around it.
	if r.ContentLength > p.maxBody() {
		writeText(sw, http.StatusRequestEntityTooLarge, "The request body is too large.\n")
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(sw, r.Body, p.maxBody())
	}
	g := p.acquire()
	if g == nil {
		if p.FailOpen {
			p.rp.ServeHTTP(sw, r)
			return
		}
		writeText(sw, http.StatusServiceUnavailable, "No WAF rule set is loaded yet.\n")
		return
	}
	defer g.release(p.log)
	tx := g.waf.NewTransactionWithOptions(experimental.Options{Context: r.Context()})
	defer p.trackTx(r.Context(), tx.ID())()
	defer func() {
		tx.ProcessLogging()
		if err := tx.Close(); err != nil {
			p.reqLog(r.Context()).Warn("close WAF transaction", "tx", tx.ID(), "error", err)
		}
	}()
	if tx.IsRuleEngineOff() {
		p.rp.ServeHTTP(sw, r)
		return
	}
	it, err := processRequest(tx, r, &p.bufs)
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		writeText(sw, http.StatusRequestEntityTooLarge, "The request body is too large.\n")
		return
	}
	if err != nil {
		p.reqLog(r.Context()).Info("read request body", "tx", tx.ID(), "client", r.RemoteAddr, "error", err)
		writeText(sw, http.StatusBadRequest, "The request body could not be read.\n")
		return
	}
	if it != nil {
		p.interrupt(sw, r, it, tx.ID())
		return
	}
	if r.Method == http.MethodConnect && !validConnectTarget(r.RequestURI) {
		writeText(sw, http.StatusBadRequest, "Malformed CONNECT target: want host:port.\n")
		return
	}
	p.rp.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), txKey{}, tx)))
}

// validConnectTarget reports whether a CONNECT request-target has the
// authority form host:port that RFC 9110 section 9.3.6 requires; net/http
// does not check it. The WAF has seen the request first.
func validConnectTarget(target string) bool {
	host, port, err := net.SplitHostPort(target)
	return err == nil && host != "" && port != ""
}

// interrupt answers a request the WAF interrupted.
func (p *Proxy) interrupt(w *statusWriter, r *http.Request, it *types.Interruption, txID string) {
	p.Metrics.block(it.RuleID)
	p.reqLog(r.Context()).Warn("request blocked", "rule_id", it.RuleID, "action", it.Action, "status", interruptionStatus(it),
		"client", r.RemoteAddr, "method", r.Method, "uri", r.RequestURI, "tx", txID)
	if it.Action == "drop" {
		w.dropped = true
		// net/http closes the connection without an answer and logs nothing.
		panic(http.ErrAbortHandler)
	}
	if p.Blocked != nil {
		p.Blocked(w, r, it, txID)
		return
	}
	WriteBlocked(w, r, it, txID)
}

// interruptionStatus is the status code an interruption answers with.
func interruptionStatus(it *types.Interruption) int {
	switch {
	case it.Action == "redirect" && it.Status >= 300 && it.Status < 400:
		return it.Status
	case it.Action == "redirect":
		return http.StatusFound
	case it.Status >= 200 && it.Status < 600:
		return it.Status
	default:
		return http.StatusForbidden
	}
}

// WriteBlocked is the default answer to an interrupted request: the rule's
// status (403 when it sets none) and a short plain-text body naming the
// transaction id, which the matched-rule log lines carry too. A redirect
// answers with the rule's Location.
func WriteBlocked(w http.ResponseWriter, _ *http.Request, it *types.Interruption, txID string) {
	status := interruptionStatus(it)
	if it.Action == "redirect" && it.Data != "" {
		w.Header().Set("Location", it.Data)
	}
	writeText(w, status, "Request blocked by the web application firewall (reference "+txID+").\n")
}

// writeText writes a small plain-text answer, replacing any header the
// upstream set but Location (which a redirect sets).
func writeText(w http.ResponseWriter, status int, body string) {
	h := w.Header()
	for k := range h {
		if k != "Location" {
			delete(h, k)
		}
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// proxyError is the ReverseProxy's ErrorHandler: an interruption in the
// response phases, or an upstream that failed.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	var ie *interruptedError
	if errors.As(err, &ie) {
		sw, ok := w.(*statusWriter)
		if !ok {
			sw = &statusWriter{ResponseWriter: w}
		}
		p.interrupt(sw, r, ie.it, ie.txID)
		return
	}
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		// The body outgrew the cap while it streamed to the upstream.
		writeText(w, http.StatusRequestEntityTooLarge, "The request body is too large.\n")
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client went away; nobody reads the answer.
		w.WriteHeader(499)
		return
	}
	p.reqLog(r.Context()).Warn("upstream request failed", "upstream", p.Upstream.Redacted(), "method", r.Method,
		"uri", r.RequestURI, "client", r.RemoteAddr, "error", err)
	writeText(w, http.StatusBadGateway, "The upstream server could not be reached.\n")
}

// statusWriter records the status code sent to the client. Unwrap lets
// http.ResponseController (which ReverseProxy uses to flush) reach the
// underlying writer.
type statusWriter struct {
	http.ResponseWriter
	status  int
	dropped bool
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) code() string {
	switch {
	case s.dropped:
		return codeDropped
	case s.status == 0:
		return "200"
	default:
		return strconv.Itoa(s.status)
	}
}

// localAddr is the server side of the request's connection, when known.
func localAddr(r *http.Request) (string, int) {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return "", 0
	}
	host, port := splitHostPort(a.String())
	return host, port
}

func splitHostPort(hp string) (string, int) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return hp, 0
	}
	port, _ := strconv.Atoi(p)
	return host, port
}
