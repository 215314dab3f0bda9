package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vilaca/portal/internal/waf/cache"
)

// Match types of a table row (Gateway API's).
const (
	matchExact  = cache.MatchExact
	matchPrefix = cache.MatchPathPrefix
	matchRegex  = cache.MatchRegex
)

// MaxRequestTargetBytes bounds the request target (path and query) a
// Router matches: a longer one is answered 414, as nginx answers a request
// line past its default 8 KiB buffer. The values of a header a row matches
// by regular expression are bounded alike (431). Go's regexp costs up to
// (program instructions) x (input bytes) per expression, and a table lets
// a request meet at most cache.MaxHostRegexInsts instructions, so routing
// one request costs at most cache.MaxHostRegexInsts x MaxRequestTargetBytes
// regex steps (about 8.4 million; 5 to 15 ns each on current CPUs).
const MaxRequestTargetBytes = 8 << 10

// MaxMatchedHeaderLines bounds the lines of one header a row's header
// match is tried against (431 beyond): a row tries each of them, so a
// request repeating a header thousands of times, within the listener's
// header limit, would cost every row that many comparisons.
const MaxMatchedHeaderLines = 16

// Router is the waf-proxy of a whole Gateway: for each request it finds the
// route match in the Gateway's table (Gateway API precedence, the first row
// that matches) and runs the request through that route's rule set, with
// the route's RuleSetOverride on top. Requests no row matches run the
// Gateway-level policy; requests no policy covers run Default (a rule set
// of their own, `--ruleset` beside `--gateway`), or pass uninspected
// without one. A route whose policy's rule set is not available is
// answered 503 unless the policy says failOpen.
//
// Before the request is matched its path is cleaned (dot segments, double
// slashes) and forwarded cleaned, so the route the WAF picked is the route
// the Gateway serves; a path with an encoded slash is refused (400), as
// the two could disagree on it.
type Router struct {
	// NewProxy returns the proxy a rule set runs in, with the upstream,
	// transport and limits set; the Router loads it. Required.
	NewProxy func(logger *slog.Logger) *Proxy
	// FailOpen lets requests through uninspected while no table has
	// loaded; false answers them 503.
	FailOpen bool
	// Logger receives the router's logs (slog.Default() when nil).
	Logger *slog.Logger
	// Metrics counts the requests the router answers itself (a request
	// it cannot route, no table, a route whose rule set is not
	// available), as the proxies count theirs; nil counts nothing.
	Metrics *Metrics
	// SecurityLogs opens the security log destinations of a policy; nil
	// means the proxy's own log only.
	SecurityLogs func([]cache.SecurityLog) (*slog.Logger, error)
	// Default, when set, runs the requests no policy covers: routes no
	// policy attaches to, and requests no route matches. A Poller keeps it
	// loaded; until it has loaded, its own FailOpen decides. It also runs
	// the requests of a failOpen policy whose rule set is unavailable, and,
	// with FailOpen, the requests that come before the first table, once
	// it is loaded: a floor rather than no inspection at all. Nil passes
	// those requests uninspected.
	Default *Proxy

	cur         atomic.Pointer[routerState]
	passthrough *Proxy
	once        sync.Once
}

// routerState is one loaded table.
type routerState struct {
	uuid     string
	rows     []compiledRow
	policies []routePolicy
	deflt    int
}

type routePolicy struct {
	proxy       *Proxy // nil when unavailable
	unavailable string
	failOpen    bool
	policy      string
	// logAttrs name the policy on the request's log lines: proxies are
	// shared between policies, so their loggers cannot.
	logAttrs []slog.Attr
}

type compiledRow struct {
	host    string // "" any; "*.x" wildcard
	path    matcher
	method  string
	headers []namedMatcher
	query   []namedMatcher
	policy  int
}

type matcher struct {
	kind  string
	value string
	re    *regexp.Regexp
	// insts is the size of re's program: a match costs up to insts steps
	// per byte of input.
	insts int
}

type namedMatcher struct {
	name string
	matcher
}

func (r *Router) init() {
	r.once.Do(func() {
		r.passthrough = r.NewProxy(r.logger())
		r.passthrough.FailOpen = true
	})
}

func (r *Router) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

// Current returns the uuid of the table in force; ok false before one
// loaded, or, with a Default, before both it and the table loaded (the
// uuid is then "table uuid+rule set uuid").
func (r *Router) Current() (uuid string, ok bool) {
	st := r.cur.Load()
	if st == nil {
		return "", false
	}
	if r.Default == nil {
		return st.uuid, true
	}
	rev, ok := r.Default.Current()
	if !ok {
		return "", false
	}
	return st.uuid + "+" + rev.UUID, true
}

// open serves a request that may go uninspected: through Default once it
// has loaded, else through the passthrough proxy.
// answer writes the router's own answer and counts it.
func (r *Router) answer(w http.ResponseWriter, status int, body string) {
	r.Metrics.request(strconv.Itoa(status))
	writeText(w, status, body)
}

func (r *Router) open(w http.ResponseWriter, req *http.Request) {
	if r.Default != nil {
		if _, ok := r.Default.Current(); ok {
			r.Default.ServeHTTP(w, req)
			return
		}
	}
	r.passthrough.ServeHTTP(w, req)
}

// compileTable checks and compiles a table's rows; proxies are filled in
// by the caller.
func compileTable(t *cache.Table) (*routerState, error) {
	st := &routerState{deflt: t.Default, policies: make([]routePolicy, len(t.Policies))}
	if t.Default < -1 || t.Default >= len(t.Policies) {
		return nil, fmt.Errorf("route table: default policy %d out of range", t.Default)
	}
	if len(t.Rows) > cache.MaxTableRows {
		return nil, fmt.Errorf("route table: %d rows, at most %d", len(t.Rows), cache.MaxTableRows)
	}
	if len(t.Policies) > cache.MaxTablePolicies {
		return nil, fmt.Errorf("route table: %d policies, at most %d", len(t.Policies), cache.MaxTablePolicies)
	}
	// The binding controller leaves out the routes that would pass the
	// regex bounds; a table that passes them anyway does not come from it
	// and would let one request cost seconds of CPU.
	var load cache.RegexLoad
	for i, row := range t.Rows {
		cr, err := compileRow(row, len(t.Policies))
		if err == nil {
			err = load.Add(row.Hostnames, cr.insts())
		}
		if err != nil {
			return nil, fmt.Errorf("route table: row %d (%s): %w", i, row.Route, err)
		}
		st.rows = append(st.rows, cr)
	}
	return st, nil
}

// insts is the regex instructions of the row's matches together.
func (c *compiledRow) insts() int {
	n := c.path.insts
	for _, m := range c.headers {
		n += m.insts
	}
	for _, m := range c.query {
		n += m.insts
	}
	return n
}

func compileRow(row cache.TableRow, policies int) (compiledRow, error) {
	cr := compiledRow{method: row.Method, policy: row.Policy}
	if row.Policy < -1 || row.Policy >= policies {
		return cr, fmt.Errorf("policy %d out of range", row.Policy)
	}
	if len(row.Hostnames) > 1 {
		return cr, errors.New("more than one hostname")
	}
	if len(row.Hostnames) == 1 {
		cr.host = strings.ToLower(row.Hostnames[0])
	}
	var err error
	cr.path = matcher{kind: matchPrefix, value: "/"}
	if row.Path != nil {
		if cr.path, err = compileMatcher(*row.Path, true); err != nil {
			return cr, fmt.Errorf("path: %w", err)
		}
	}
	for _, h := range row.Headers {
		m, err := compileMatcher(h, false)
		if err != nil {
			return cr, fmt.Errorf("header %s: %w", h.Name, err)
		}
		cr.headers = append(cr.headers, namedMatcher{name: http.CanonicalHeaderKey(h.Name), matcher: m})
	}
	for _, q := range row.Query {
		m, err := compileMatcher(q, false)
		if err != nil {
			return cr, fmt.Errorf("query parameter %s: %w", q.Name, err)
		}
		cr.query = append(cr.query, namedMatcher{name: q.Name, matcher: m})
	}
	return cr, nil
}

func compileMatcher(m cache.StringMatch, isPath bool) (matcher, error) {
	switch {
	case m.Type == matchExact, m.Type == matchPrefix && isPath:
		return matcher{kind: m.Type, value: m.Value}, nil
	case m.Type == matchRegex:
		insts, err := cache.RegexInsts(m.Value)
		if err != nil {
			return matcher{}, err
		}
		re, err := regexp.Compile(cache.AnchoredRegex(m.Value))
		if err != nil {
			return matcher{}, err
		}
		return matcher{kind: m.Type, re: re, insts: insts}, nil
	}
	return matcher{}, fmt.Errorf("unknown match type %q", m.Type)
}

// match reports whether s matches, adding the regex steps it may take to
// steps.
func (m matcher) match(s string, steps *int) bool {
	switch m.kind {
	case matchExact:
		return s == m.value
	case matchPrefix:
		// Gateway API: a prefix matches whole path elements.
		p := strings.TrimSuffix(m.value, "/")
		return p == "" || s == p || strings.HasPrefix(s, p+"/")
	case matchRegex:
		*steps += m.insts * len(s)
		return m.re.MatchString(s)
	}
	return false
}

// headerLimitError: a header a row matches has more lines than
// MaxMatchedHeaderLines, or values longer than MaxRequestTargetBytes
// together where a regular expression matches them (431).
type headerLimitError struct{ name, why string }

func (e headerLimitError) Error() string { return "request header " + e.name + " " + e.why }

// checkHeader bounds what matching header values vs costs.
func checkHeader(name string, vs []string, regex bool) error {
	if len(vs) > MaxMatchedHeaderLines {
		return headerLimitError{name, fmt.Sprintf("has more than %d lines", MaxMatchedHeaderLines)}
	}
	if regex {
		n := 0
		for _, v := range vs {
			n += len(v)
		}
		if n > MaxRequestTargetBytes {
			return headerLimitError{name, fmt.Sprintf("is longer than %d bytes and matched by a regular expression", MaxRequestTargetBytes)}
		}
	}
	return nil
}

func hostMatches(pattern, host string) bool {
	if pattern == "" {
		return true
	}
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return strings.HasSuffix(host, suffix) && len(host) > len(suffix)
	}
	return host == pattern
}

// matches reports whether the request matches the row, adding the regex
// steps it may take to steps. The path and query are within
// MaxRequestTargetBytes; the headers the row matches must be within
// checkHeader's bounds, else the request is refused rather than matched.
func (c *compiledRow) matches(host, p string, r *http.Request, query url.Values, steps *int) (bool, error) {
	if !hostMatches(c.host, host) || !c.path.match(p, steps) || (c.method != "" && r.Method != c.method) {
		return false, nil
	}
	for _, h := range c.headers {
		vs := r.Header.Values(h.name)
		if h.name == "Host" {
			vs = []string{r.Host}
		}
		if err := checkHeader(h.name, vs, h.kind == matchRegex); err != nil {
			return false, err
		}
		ok := false
		for _, v := range vs {
			if h.match(v, steps) {
				ok = true
				break
			}
		}
		if !ok {
			return false, nil
		}
	}
	for _, q := range c.query {
		vs, ok := query[q.name]
		if !ok || !q.match(vs[0], steps) {
			return false, nil
		}
	}
	return true, nil
}

// pick returns the policy index the request runs: the first matching row's,
// else the default; and the regex steps matching took, instructions times
// bytes of each expression tried, an upper bound of Go's regexp's work.
// An error means the request cannot be matched within the bounds.
func (st *routerState) pick(r *http.Request, p string) (policy, steps int, err error) {
	host := strings.ToLower(hostOnly(r.Host))
	query := r.URL.Query()
	for i := range st.rows {
		ok, err := st.rows[i].matches(host, p, r, query, &steps)
		if err != nil {
			return 0, steps, err
		}
		if ok {
			return st.rows[i].policy, steps, nil
		}
	}
	return st.deflt, steps, nil
}

// cleanPath is the path the request is matched and forwarded with.
func cleanPath(r *http.Request) (string, error) {
	if strings.Contains(strings.ToLower(r.URL.RawPath), "%2f") || strings.Contains(r.URL.Path, "\\") {
		return "", errors.New("encoded slash or backslash in the path")
	}
	p := r.URL.Path
	if p == "" {
		return "/", nil
	}
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c, nil
}

// ServeHTTP runs the request through the rule set of its route.
func (r *Router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.init()
	if len(req.RequestURI) > MaxRequestTargetBytes {
		r.answer(w, http.StatusRequestURITooLong, fmt.Sprintf("The request target is longer than %d bytes.\n", MaxRequestTargetBytes))
		return
	}
	st := r.cur.Load()
	if st == nil {
		if r.FailOpen {
			r.open(w, req)
			return
		}
		r.answer(w, http.StatusServiceUnavailable, "No WAF route table is loaded yet.\n")
		return
	}
	if req.Method == http.MethodConnect || req.URL.Opaque != "" {
		r.answer(w, http.StatusBadRequest, "This request form is not routed.\n")
		return
	}
	p, err := cleanPath(req)
	if err != nil {
		r.answer(w, http.StatusBadRequest, "Malformed request path: "+err.Error()+".\n")
		return
	}
	if p != req.URL.Path {
		// Forward what was matched; RequestURI stays the client's, which
		// the WAF inspects as sent.
		u := *req.URL
		u.Path, u.RawPath = p, ""
		req = req.Clone(req.Context())
		req.URL = &u
	}
	idx, _, err := st.pick(req, p)
	if err != nil {
		r.answer(w, http.StatusRequestHeaderFieldsTooLarge, "The "+err.Error()+", and a route matches on it.\n")
		return
	}
	if idx < 0 {
		if r.Default != nil {
			r.Default.ServeHTTP(w, req)
			return
		}
		r.passthrough.ServeHTTP(w, req)
		return
	}
	pol := st.policies[idx]
	switch {
	case pol.proxy != nil:
		pol.proxy.ServeHTTP(w, req.WithContext(withLogAttrs(req.Context(), pol.logAttrs)))
	case pol.failOpen:
		r.open(w, req)
	default:
		r.logger().Warn("request refused: the route's rule set is not available", "policy", pol.policy, "reason", pol.unavailable,
			"method", req.Method, "uri", req.RequestURI)
		r.answer(w, http.StatusServiceUnavailable, "The WAF rule set of this route is not available.\n")
	}
}
