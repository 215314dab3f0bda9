// Command peerbench measures the waf-proxy against Debian's nginx with
// libnginx-mod-http-modsecurity (libmodsecurity3), both running the same
// OWASP CRS v4.25 files at paranoia level 1 in blocking mode, in front of the
// same static upstream on 127.0.0.1, driven by wrk. `make bench-waf` runs it
// after `make bench-tools` has installed nginx, the module and wrk.
//
// It measures two CPU layouts (-layouts): per-core, each WAF pinned alone to
// CPU 1 (nginx worker_processes 1, waf-proxy GOMAXPROCS=1) with wrk, the
// upstream and this process on CPU 0; and two-core, everything on every CPU.
// For each scenario (benign GET, GET of a 1 KB text/html page, JSON POST,
// 10 KB form POST, attack GET) it runs wrk against each peer in turn and
// prints requests per second, p50 and p99 latency, and the waf-proxy/nginx
// ratios, one table per layout.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/vilaca/portal/internal/pki"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

type options struct {
	portal      string
	work        string
	out         string
	duration    time.Duration
	threads     int
	connections int
	rounds      int
	layouts     string
	only        string
}

func main() {
	o := options{}
	flag.StringVar(&o.portal, "portal", "bin/portal", "the portal binary (make build)")
	flag.StringVar(&o.work, "work", "bin/bench-waf", "working directory: CRS files, nginx configuration, logs")
	flag.StringVar(&o.out, "out", "", "also write the report to this file")
	flag.DurationVar(&o.duration, "duration", 8*time.Second, "wrk duration of each run")
	flag.IntVar(&o.threads, "threads", 2, "wrk threads")
	flag.IntVar(&o.connections, "connections", 32, "wrk connections")
	flag.IntVar(&o.rounds, "rounds", 5, "runs per scenario and peer, alternating; the median is reported")
	flag.StringVar(&o.layouts, "layouts", "per-core,two-core", "comma-separated CPU layouts to measure: per-core (each WAF pinned alone to one core, wrk to another) and two-core (everything on every core)")
	flag.StringVar(&o.only, "scenarios", "", "comma-separated scenarios to run (default: all)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	for _, tool := range []string{"nginx", "wrk", "taskset"} {
		if _, err := lookPath(tool); err != nil {
			return fmt.Errorf("%s not found: run `make bench-tools`", tool)
		}
	}
	work, err := filepath.Abs(o.work)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	all, err := layouts(o)
	if err != nil {
		return err
	}
	if o.only != "" {
		keep := strings.Split(o.only, ",")
		scenarios = slices.DeleteFunc(scenarios, func(sc scenario) bool { return !slices.Contains(keep, sc.name) })
	}
	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	var b strings.Builder
	for name := range strings.SplitSeq(o.layouts, ",") {
		l, ok := all[strings.TrimSpace(name)]
		if !ok {
			return fmt.Errorf("-layouts: unknown or unavailable layout %q (per-core needs 2 CPUs)", name)
		}
		results, peers, err := measureLayout(ctx, o, l, work, up.Addr().String())
		if err != nil {
			return err
		}
		report(&b, o, l, peers, results)
	}
	fmt.Print(b.String())
	if o.out != "" {
		return os.WriteFile(o.out, []byte(b.String()), 0o644)
	}
	return nil
}

// measureLayout starts both peers on the layout's CPUs, measures every
// scenario and stops them.
func measureLayout(ctx context.Context, o options, l layout, work, upstream string) (map[string]map[string]wrkResult, []*peer, error) {
	if err := l.pinSelf(); err != nil {
		return nil, nil, err
	}
	peers, err := startPeers(ctx, o, l, work, upstream)
	defer func() {
		for _, p := range peers {
			p.stop()
		}
	}()
	if err != nil {
		return nil, peers, err
	}
	load := loadAverage()
	results, err := measure(ctx, o, l, work, peers)
	fmt.Fprintf(os.Stderr, "%s: load average %s before, %s after\n", l.name, load, loadAverage())
	return results, peers, err
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// benchRules is the engine configuration both peers run before the CRS:
// Coraza's recommended settings (the same as ModSecurity's), blocking, no
// audit log.
const benchRules = `SecRuleEngine On
SecRequestBodyAccess On
SecRule REQUEST_HEADERS:Content-Type "^(?:application(?:/soap\+|/)|text/)xml" "id:'200000',phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=XML"
SecRule REQUEST_HEADERS:Content-Type "^application/json" "id:'200001',phase:1,t:none,t:lowercase,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRequestBodyLimit 13107200
SecRequestBodyLimitAction Reject
SecRule REQBODY_ERROR "!@eq 0" "id:'200002',phase:2,t:none,log,deny,status:400,msg:'Failed to parse request body.',logdata:'%{reqbody_error_msg}',severity:2"
SecRule MULTIPART_STRICT_ERROR "!@eq 0" "id:'200003',phase:2,t:none,log,deny,status:400,msg:'Multipart request body failed strict validation.'"
SecResponseBodyAccess On
SecResponseBodyMimeType text/plain text/html text/xml
SecResponseBodyLimit 524288
SecResponseBodyLimitAction ProcessPartial
SecAuditEngine Off
`

// page is what the static upstream answers under /page/: 1 KB of HTML,
// which both WAFs inspect (text/html is a SecResponseBodyMimeType).
var page = "<!doctype html><html><head><title>bench</title></head><body>" + strings.Repeat("<p>Lorem ipsum dolor sit amet, consectetur adipiscing elit.</p>", 15) + "</body></html>\n"

// tiny is what it answers elsewhere: a JSON body neither WAF inspects, so
// the other scenarios measure the request side.
const tiny = `{"ok":true}` + "\n"

// startUpstream serves page under /page/ and tiny elsewhere, on 127.0.0.1.
func startUpstream() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasPrefix(r.URL.Path, "/page/") {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, page)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, tiny)
	})}
	go func() { _ = srv.Serve(ln) }()
	return ln, nil
}

// startCache serves the waf-proxy's rule set, benchRules and the embedded
// CRS, as Portal's cache does: over TLS with a certificate of its own CA,
// for one bearer token. It writes the CA and the token to work, for
// --ca-file and --token-file, and returns its URL.
func startCache(ctx context.Context, work string) (string, error) {
	c := cache.New(nil, nil)
	rules := benchRules + "Include @crs-setup.conf.example\nInclude @owasp_crs/*.conf\n"
	compiled, err := ruleset.Compile(ruleset.Bundle{Rules: rules}, ruleset.Options{})
	if err != nil {
		return "", fmt.Errorf("the benchmark rule set does not compile: %w", err)
	}
	_ = compiled.Close()
	c.Put(cache.Key("bench", "crs"), ruleset.RevisionUUID(ruleset.Bundle{Rules: rules}.SHA256()), rules, nil)
	cert, err := pki.NewSelfSigned(time.Now(), 24*time.Hour, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return "", err
	}
	token := rand.Text()
	if err := errors.Join(os.WriteFile(filepath.Join(work, "ca.crt"), cert.CABundle(), 0o600),
		os.WriteFile(filepath.Join(work, "token"), []byte(token), 0o600)); err != nil {
		return "", err
	}
	srv := cache.NewServer(c, cache.ServerOptions{
		Addr: "127.0.0.1:0",
		Authorizer: cache.AuthorizerFunc(func(_ context.Context, t, _, _ string) (cache.Decision, error) {
			return cache.Decision{Allowed: t == token, Reason: cache.DenyUnauthenticated}, nil
		}),
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.Serving, nil },
	}, nil)
	errc := make(chan error, 1)
	go func() { errc <- srv.Start(ctx) }()
	<-srv.Ready()
	if srv.Addr() == "" {
		return "", <-errc
	}
	return "https://" + srv.Addr(), nil
}

// waitReady polls url until it answers 200, for up to a minute.
func waitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after a minute (last: %v)", url, errors.Join(err, statusErr(resp)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func statusErr(resp *http.Response) error {
	if resp == nil {
		return nil
	}
	return fmt.Errorf("status %d", resp.StatusCode)
}

func report(b *strings.Builder, o options, l layout, peers []*peer, results map[string]map[string]wrkResult) {
	fmt.Fprintf(b, "WAF peer benchmark, %s\n", l.title)
	fmt.Fprintf(b, "wrk -t%d -c%d -d%s, median of %d alternating rounds; CRS v4.25 paranoia level 1, blocking\n",
		l.threads, l.connections, o.duration, o.rounds)
	for _, p := range peers {
		fmt.Fprintf(b, "  %s: %s\n", p.name, p.version)
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpeer\treq/s\tp50\tp99\tnon-2xx per run\t")
	for _, sc := range scenarios {
		for _, p := range peers {
			r := results[sc.name][p.name]
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%d\t\n", sc.name, p.name, r.rps, r.p50, r.p99, r.non2xx)
		}
	}
	_ = tw.Flush()
	b.WriteString("ratios (waf-proxy / nginx+ModSecurity): throughput higher is better, p50 and p99 lower are better\n")
	for _, sc := range scenarios {
		w, n := results[sc.name][peerWAFProxy], results[sc.name][peerNginx]
		fmt.Fprintf(b, "  %-10s throughput x%.2f  p50 x%.2f  p99 x%.2f\n", sc.name, w.rps/n.rps,
			float64(w.p50)/float64(n.p50), float64(w.p99)/float64(n.p99))
	}
	b.WriteString("\n")
}
