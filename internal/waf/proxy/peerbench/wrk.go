package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// scenario is one kind of request, the same for both peers.
type scenario struct {
	name string
	// path and query of the request.
	path string
	// method, contentType and body of the request; GET without a body when
	// method is empty.
	method, contentType, body string
	// want is the status both peers must answer.
	want int
}

var browserHeaders = [][2]string{
	{"User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36"},
	{"Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"},
	{"Accept-Language", "en-US,en;q=0.5"},
	{"Host", "app.example.com"},
}

// formBody is a benign 10 KB urlencoded form: 40 fields of prose.
var formBody = func() string {
	var b strings.Builder
	for i := range 40 {
		if i > 0 {
			b.WriteByte('&')
		}
		fmt.Fprintf(&b, "field%02d=", i)
		for b.Len() < (i+1)*256 {
			b.WriteString("lorem+ipsum+dolor+sit+amet+consectetur+adipiscing+elit+")
		}
	}
	return b.String()
}()

var scenarios = []scenario{
	{name: "benign-get", path: "/shop/products?category=books&page=2&sort=price", want: http.StatusOK},
	// The upstream answers /page/ with 1 KB of text/html, a
	// SecResponseBodyMimeType, so both WAFs inspect the response body.
	{name: "html-get", path: "/page/products?category=books&page=2&sort=price", want: http.StatusOK},
	{name: "json-post", path: "/api/orders", method: "POST", contentType: "application/json", want: http.StatusOK,
		body: `{"customer":{"name":"Alice Example","email":"alice@example.com"},"items":[{"sku":"BK-1024","qty":2},{"sku":"BK-2048","qty":1}],"note":"Please deliver after 5pm"}`},
	{name: "form-post", path: "/account/profile", method: "POST", contentType: "application/x-www-form-urlencoded", want: http.StatusOK, body: formBody},
	{name: "attack-get", path: "/search?q=%3Cscript%3Ealert%28document.cookie%29%3C%2Fscript%3E&id=1%27%20OR%20%271%27%3D%271", want: http.StatusForbidden},
}

// lua is the scenario's wrk script.
func (sc scenario) lua() string {
	var b strings.Builder
	headers := browserHeaders
	if sc.contentType != "" {
		headers = append(slices.Clone(headers), [2]string{"Content-Type", sc.contentType})
	}
	for _, h := range headers {
		fmt.Fprintf(&b, "wrk.headers[%q] = %q\n", h[0], h[1])
	}
	if sc.method != "" {
		fmt.Fprintf(&b, "wrk.method = %q\nwrk.body = %q\n", sc.method, sc.body)
	}
	return b.String()
}

// wrkResult is what one wrk run measured.
type wrkResult struct {
	rps      float64
	p50, p99 time.Duration
	non2xx   int
}

// measure runs every scenario against every peer, after checking that
// each peer answers it with the expected status. Runs alternate between
// the peers, o.rounds times, and each figure is the median over the
// rounds, so that a burst of other load on the machine hits both alike.
func measure(ctx context.Context, o options, l layout, work string, peers []*peer) (map[string]map[string]wrkResult, error) {
	results := map[string]map[string]wrkResult{}
	for _, sc := range scenarios {
		script := filepath.Join(work, sc.name+".lua")
		if err := os.WriteFile(script, []byte(sc.lua()), 0o644); err != nil {
			return nil, err
		}
		runs := map[string][]wrkResult{}
		for _, p := range peers {
			if err := check(p, sc); err != nil {
				return nil, err
			}
			// Warm-up: on a busy machine it may complete no request, which
			// is no error yet.
			if _, err := runWrk(ctx, l, p.url+sc.path, script, 2*time.Second); err != nil && ctx.Err() != nil {
				return nil, err
			}
		}
		for range o.rounds {
			for _, p := range peers {
				r, err := runWrk(ctx, l, p.url+sc.path, script, o.duration)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", sc.name, p.name, err)
				}
				fmt.Fprintf(os.Stderr, "%-8s %-10s %-18s %8.0f req/s  p50 %-9s p99 %s\n", l.name, sc.name, p.name, r.rps, r.p50, r.p99)
				runs[p.name] = append(runs[p.name], r)
			}
		}
		results[sc.name] = map[string]wrkResult{}
		for name, rs := range runs {
			results[sc.name][name] = median(rs)
		}
	}
	return results, nil
}

// median takes the median of each figure on its own.
func median(rs []wrkResult) wrkResult {
	pick := func(get func(wrkResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return wrkResult{
		rps:    pick(func(r wrkResult) float64 { return r.rps }),
		p50:    time.Duration(pick(func(r wrkResult) float64 { return float64(r.p50) })),
		p99:    time.Duration(pick(func(r wrkResult) float64 { return float64(r.p99) })),
		non2xx: int(pick(func(r wrkResult) float64 { return float64(r.non2xx) })),
	}
}

// check sends the scenario's request once and compares the status.
func check(p *peer, sc scenario) error {
	method := sc.method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, p.url+sc.path, strings.NewReader(sc.body))
	if err != nil {
		return err
	}
	for _, h := range browserHeaders {
		req.Header.Set(h[0], h[1])
	}
	req.Host = "app.example.com"
	if sc.contentType != "" {
		req.Header.Set("Content-Type", sc.contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", sc.name, p.name, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != sc.want {
		return fmt.Errorf("%s answers %s with %d, want %d: the peers do not run the same rules", p.name, sc.name, resp.StatusCode, sc.want)
	}
	return nil
}

func runWrk(ctx context.Context, l layout, url, script string, d time.Duration) (wrkResult, error) {
	wrk, err := lookPath("wrk")
	if err != nil {
		return wrkResult{}, err
	}
	args := []string{"-t", strconv.Itoa(l.threads), "-c", strconv.Itoa(l.connections), "-d", fmt.Sprintf("%ds", int(d.Seconds())), "--timeout", "10s", "--latency", "-s", script, url}
	name, args := l.pin(l.loadCPUs, wrk, args...)
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v: %s", err, out)
	}
	return parseWrk(string(out))
}

// parseWrk reads wrk --latency output: "Requests/sec:", the 50% and 99%
// latency percentiles and "Non-2xx or 3xx responses:".
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			r.rps, _ = strconv.ParseFloat(f[1], 64)
		case len(f) == 2 && f[0] == "50%":
			r.p50, _ = parseWrkDuration(f[1])
		case len(f) == 2 && f[0] == "99%":
			r.p99, _ = parseWrkDuration(f[1])
		case len(f) == 5 && f[0] == "Non-2xx":
			r.non2xx, _ = strconv.Atoi(f[4])
		}
	}
	if strings.Contains(out, "\n  0 requests in ") {
		// Nothing completed within the run (a peer slower than the
		// duration): 0 req/s is the measurement, not a failure.
		return wrkResult{}, nil
	}
	if r.rps == 0 || r.p99 == 0 {
		return r, fmt.Errorf("unexpected wrk output:\n%s", out)
	}
	return r, nil
}

// parseWrkDuration reads wrk's "1.23ms", "456.78us", "1.02s", "2.00m".
func parseWrkDuration(s string) (time.Duration, error) {
	if strings.HasSuffix(s, "m") && !strings.HasSuffix(s, "ms") {
		s += "0s" // wrk's minutes: "2.00m" -> "2.00m0s"
	}
	return time.ParseDuration(s)
}
