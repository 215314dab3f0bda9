package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/vilaca/portal/internal/flagalias"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/proxy"
)

// wafProxyOptions are the flags of `portal waf-proxy`.
type wafProxyOptions struct {
	cacheURL, ruleSet, upstream, listen, metricsAddr string
	gateway, securityLogDir                          string
	failurePolicy, logLevel                          string
	caFile, tokenFile                                string
	pollInterval                                     time.Duration
	requestBodyLimit, responseBodyLimit              int64
	maxRequestBody, maxResponseBody                  int64
	server                                           proxy.ServerOptions

	// ready, when set, is called with the bound addresses once both
	// listeners are up (tests).
	ready func(listen, metrics string)
}

// wafProxyShutdownTimeout bounds the graceful shutdown of the listeners.
const wafProxyShutdownTimeout = 15 * time.Second

func newWAFProxyCommand() *cobra.Command {
	o := &wafProxyOptions{
		listen: ":8000", metricsAddr: ":9090", failurePolicy: "fail", logLevel: "info",
		pollInterval: proxy.DefaultPollInterval, server: proxy.DefaultServerOptions(),
		tokenFile:       "/var/run/secrets/portal/waf-cache/token",
		maxRequestBody:  proxy.DefaultMaxRequestBodyBytes,
		maxResponseBody: proxy.DefaultMaxResponseBodyBytes,
	}
	cmd := &cobra.Command{
		Use:   "waf-proxy",
		Short: "Run a reverse proxy guarded by a WAF rule set from Portal's cache",
		Long: `Proxy HTTP requests to --upstream through Coraza, running the rule set
--ruleset (namespace/name) that Portal compiles and serves from its rule set
cache at --cache-url (https). The proxy proves who it is with the
ServiceAccount token in --token-file (audience ` + cache.Audience + `), trusts
only the CA in --ca-file, and compiles an entry only when it has the sha256
the cache announced. The proxy polls the cache every --poll-interval and
swaps in a new revision without dropping a request; a revision that does not
compile leaves the last good one in force. Until a rule set has loaded,
--failure-policy decides: fail answers 503, allow proxies uninspected.

With --gateway (namespace/name), the proxy guards a whole Gateway: it polls
the Gateway's route table, which says which rule set (and which
RuleSetOverride exclusions) each route match runs, and picks it per request,
as WAFGatewayBindingPolicies attach them. Requests no policy covers (a route
without one, or no route matching) pass uninspected, unless --ruleset is
given too: then they run that rule set (what an Engine's waf-proxy does).
Until the route table has loaded, --failure-policy decides for every
request.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.cacheURL, "cache-url", "", "base URL of Portal's rule set cache, e.g. https://portal-waf-cache.portal-system:18080 (required)")
	f.StringVar(&o.caFile, "ca-file", "", "PEM CA bundle the cache's serving certificate must chain to; re-read before each poll (required)")
	f.StringVar(&o.tokenFile, "token-file", o.tokenFile, "file holding a ServiceAccount token with audience "+cache.Audience+" (a projected token volume); re-read before each poll")
	f.StringVar(&o.ruleSet, "ruleset", "", "the RuleSet to enforce, as namespace/name; with --gateway, the rule set of the requests no WAFGatewayBindingPolicy covers (this or --gateway is required)")
	f.StringVar(&o.gateway, "gateway", "", "the Gateway whose route table to enforce, as namespace/name: each request runs the rule set its route's WAFGatewayBindingPolicy attaches (--ruleset, when given, runs the rest)")
	f.StringVar(&o.securityLogDir, "security-log-dir", "", "directory for the File security logs of WAFGatewayBindingPolicies (with --gateway); empty refuses File destinations")
	f.StringVar(&o.upstream, "upstream", "", "URL of the server to proxy to, e.g. http://127.0.0.1:8080 (required)")
	f.StringVar(&o.listen, "listen", o.listen, "listen address of the proxy")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", o.metricsAddr, "listen address of /metrics, /healthz and /readyz; 0 disables it")
	f.DurationVar(&o.pollInterval, "poll-interval", o.pollInterval, "time between polls of the cache (at least 1s)")
	f.StringVar(&o.failurePolicy, "failure-policy", o.failurePolicy, "before any rule set has loaded: fail (answer 503) or allow (proxy uninspected)")
	f.Int64Var(&o.requestBodyLimit, "request-body-limit", 0, "most request body bytes the WAF inspects; 0 keeps the rule set's SecRequestBodyLimit")
	f.Int64Var(&o.responseBodyLimit, "response-body-limit", 0, "most response body bytes the WAF inspects, at most --max-response-body-bytes; 0 keeps the rule set's SecResponseBodyLimit")
	f.Int64Var(&o.maxRequestBody, "max-request-body-bytes", o.maxRequestBody, "hard cap on a request body: larger bodies get 413, whatever the rule set says")
	f.Int64Var(&o.maxResponseBody, "max-response-body-bytes", o.maxResponseBody, "hard cap on the part of a response the WAF buffers: SecResponseBodyLimit is clamped to it, whatever the rule set says")
	f.DurationVar(&o.server.ReadTimeout, "read-timeout", o.server.ReadTimeout, "longest time to read a request, body included")
	f.DurationVar(&o.server.WriteTimeout, "write-timeout", o.server.WriteTimeout, "longest time from the end of the request headers to the end of the answer")
	f.DurationVar(&o.server.IdleTimeout, "idle-timeout", o.server.IdleTimeout, "longest time a keep-alive connection waits for its next request")
	f.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error")
	flagalias.Deprecated(f, "metrics-addr", "metrics-bind-address")
	return cmd
}

// wafProxySetup is what the flags make: one proxy and its poller
// (--ruleset), or a router and its table poller (--gateway).
type wafProxySetup struct {
	handler  http.Handler
	poll     func(context.Context) error
	current  func() (string, bool)
	failOpen bool
	unload   func()
	registry *prometheus.Registry
	log      *slog.Logger
}

// validate checks the flags and builds the proxy and its poller.
func (o *wafProxyOptions) validate() (*wafProxySetup, error) {
	t, err := o.checkFlags()
	if err != nil {
		return nil, err
	}
	client, err := o.cacheClient()
	if err != nil {
		return nil, err
	}
	log, err := newLogger(o.logLevel)
	if err != nil {
		return nil, err
	}
	return o.build(t, client, log), nil
}

// wafProxyTargets are what the flags name: the rule set and Gateway (either
// may be empty) and the upstream.
type wafProxyTargets struct {
	rsNS, rsName, gwNS, gwName string
	upstream                   *url.URL
}

// checkFlags checks the flags that need no file or network, so a typo fails
// before anything is read.
func (o *wafProxyOptions) checkFlags() (wafProxyTargets, error) {
	var t wafProxyTargets
	switch {
	case o.cacheURL == "":
		return t, errors.New("--cache-url is required")
	case o.ruleSet == "" && o.gateway == "":
		return t, errors.New("--ruleset is required (or --gateway, to enforce a Gateway's per-route table)")
	}
	for _, req := range []struct{ flag, value string }{
		{"--upstream", o.upstream}, {"--ca-file", o.caFile}, {"--token-file", o.tokenFile},
	} {
		if req.value == "" {
			return t, fmt.Errorf("%s is required", req.flag)
		}
	}
	var err error
	if o.ruleSet != "" {
		if t.rsNS, t.rsName, err = proxy.ParseRuleSet(o.ruleSet); err != nil {
			return t, fmt.Errorf("--ruleset: %w", err)
		}
	}
	if o.gateway != "" {
		if t.gwNS, t.gwName, err = proxy.ParseRuleSet(o.gateway); err != nil {
			return t, fmt.Errorf("--gateway: %w", err)
		}
	}
	if o.pollInterval < proxy.MinPollInterval {
		return t, fmt.Errorf("--poll-interval %s is too short: the minimum is %s", o.pollInterval, proxy.MinPollInterval)
	}
	if o.failurePolicy != "fail" && o.failurePolicy != "allow" {
		return t, fmt.Errorf("--failure-policy %q: use fail or allow", o.failurePolicy)
	}
	if o.requestBodyLimit < 0 || o.responseBodyLimit < 0 {
		return t, errors.New("--request-body-limit and --response-body-limit must not be negative")
	}
	if o.maxRequestBody <= 0 {
		return t, errors.New("--max-request-body-bytes must be positive")
	}
	if o.maxResponseBody <= 0 {
		return t, errors.New("--max-response-body-bytes must be positive")
	}
	if o.responseBodyLimit > o.maxResponseBody {
		return t, fmt.Errorf("--response-body-limit %d is above --max-response-body-bytes %d", o.responseBodyLimit, o.maxResponseBody)
	}
	up, err := url.Parse(o.upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return t, fmt.Errorf("--upstream %q: want http(s)://host[:port][/prefix]", o.upstream)
	}
	t.upstream = up
	if cu, err := url.Parse(o.cacheURL); err != nil || cu.Scheme != "https" {
		return t, fmt.Errorf("--cache-url %q: the rule set cache serves TLS only: want https://host:port", o.cacheURL)
	}
	return t, nil
}

// cacheClient builds the client of the rule set cache, reading the CA and
// the token once so that a missing file fails at start, not at the first poll.
func (o *wafProxyOptions) cacheClient() (*cache.Client, error) {
	transport, err := cache.NewCATransport(o.caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	token := cache.TokenFile(o.tokenFile)
	if _, err := token(); err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	client, err := cache.NewClient(o.cacheURL, &http.Client{Transport: transport, Timeout: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("--cache-url: %w", err)
	}
	client.Token = token
	return client, nil
}

// build wires the proxy (--ruleset) and the router (--gateway) to their
// pollers; with both, the router's default is the --ruleset proxy.
func (o *wafProxyOptions) build(t wafProxyTargets, client *cache.Client, log *slog.Logger) *wafProxySetup {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := proxy.NewMetrics(reg)
	newProxy := func(l *slog.Logger) *proxy.Proxy {
		return &proxy.Proxy{
			Upstream: t.upstream, FailOpen: o.failurePolicy == "allow", Logger: l, Metrics: m,
			RequestBodyLimit: o.requestBodyLimit, ResponseBodyLimit: o.responseBodyLimit,
			MaxRequestBodyBytes: o.maxRequestBody, MaxResponseBodyBytes: o.maxResponseBody,
		}
	}
	s := &wafProxySetup{registry: reg, log: log, failOpen: o.failurePolicy == "allow"}
	var p *proxy.Proxy
	var polls []func(context.Context) error
	if o.ruleSet != "" {
		p = newProxy(log.With("ruleset", o.ruleSet))
		poller := &proxy.Poller{Client: client, Namespace: t.rsNS, Name: t.rsName, Interval: o.pollInterval, Target: p, Logger: log, Metrics: m}
		polls = append(polls, poller.Run)
		s.handler, s.unload = p, p.Close
		s.current = func() (string, bool) {
			rev, ok := p.Current()
			return rev.UUID, ok
		}
	}
	if o.gateway != "" {
		logs := &proxy.SecurityLogs{Dir: o.securityLogDir, Base: log.Handler()}
		r := &proxy.Router{NewProxy: newProxy, FailOpen: s.failOpen, Logger: log, SecurityLogs: logs.Open, Default: p, Metrics: m}
		tp := &proxy.TablePoller{Client: client, Namespace: t.gwNS, Gateway: t.gwName, Interval: o.pollInterval, Target: r, Logger: log, Metrics: m}
		polls = append(polls, tp.Run)
		s.handler, s.current = r, r.Current
		if p == nil {
			s.unload = func() {}
		}
	}
	s.poll = func(ctx context.Context) error {
		g, gctx := errgroup.WithContext(ctx)
		for _, run := range polls {
			g.Go(func() error { return run(gctx) })
		}
		return g.Wait()
	}
	return s
}

func (o *wafProxyOptions) run(ctx context.Context) error {
	gcPercent, memLimit := applyGCDefaults(os.Getenv, cgroupMemoryMax, wafProxyGCPercent)
	s, err := o.validate()
	if err != nil {
		return usageError(err)
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("waf-proxy: listen on %s: %w", o.listen, err)
	}
	servers := []*http.Server{proxy.NewServer(s.handler, o.server)}
	listeners := []net.Listener{ln}
	metricsAddr := ""
	if o.metricsAddr != "0" {
		mln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("waf-proxy: listen on %s: %w", o.metricsAddr, err)
		}
		metricsAddr = mln.Addr().String()
		servers = append(servers, proxy.NewServer(s.opsHandler(), proxy.DefaultServerOptions()))
		listeners = append(listeners, mln)
	}
	s.log.Info("waf-proxy starting", "listen", ln.Addr().String(), "metrics", metricsAddr, "upstream", o.upstream,
		"ruleset", o.ruleSet, "gateway", o.gateway, "cache", o.cacheURL, "failure_policy", o.failurePolicy, "gogc", gcPercent, "gomemlimit", memLimit)
	if o.ready != nil {
		o.ready(ln.Addr().String(), metricsAddr)
	}
	return serveUntilDone(ctx, s, servers, listeners)
}

// serveUntilDone runs the servers and the poller until ctx ends or a server
// fails, then shuts the servers down gracefully and unloads the WAF.
func serveUntilDone(ctx context.Context, s *wafProxySetup, servers []*http.Server, listeners []net.Listener) error {
	g, gctx := errgroup.WithContext(ctx)
	for i, srv := range servers {
		g.Go(func() error {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("waf-proxy: serve on %s: %w", listeners[i].Addr(), err)
			}
			return nil
		})
	}
	g.Go(func() error { return s.poll(gctx) })
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(gctx), wafProxyShutdownTimeout)
		defer cancel()
		var errs []error
		for _, srv := range servers {
			errs = append(errs, srv.Shutdown(sctx))
		}
		return errors.Join(errs...)
	})
	err := g.Wait()
	s.unload()
	s.log.Info("waf-proxy stopped")
	return err
}

// opsHandler serves /metrics, /healthz (the process is up) and /readyz (a
// rule set is loaded, or --failure-policy allow).
func (s *wafProxySetup) opsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if uuid, ok := s.current(); ok {
			_, _ = fmt.Fprintf(w, "ok: revision %s\n", uuid)
			return
		}
		if s.failOpen {
			_, _ = w.Write([]byte("ok: no rule set loaded yet; --failure-policy allow\n"))
			return
		}
		http.Error(w, "no rule set loaded yet", http.StatusServiceUnavailable)
	})
	return mux
}
