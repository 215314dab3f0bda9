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
	// lua is the wrk script; empty for a plain GET.
	lua string
	// want is the status both peers must answer.
	want int
}

const browserHeaders = `wrk.headers["User-Agent"] = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36"
wrk.headers["Accept"] = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
wrk.headers["Accept-Language"] = "en-US,en;q=0.5"
wrk.headers["Host"] = "app.example.com"
`

var scenarios = []scenario{
	{name: "benign-get", path: "/shop/products?category=books&page=2&sort=price", lua: browserHeaders, want: http.StatusOK},
	{name: "json-post", path: "/api/orders", want: http.StatusOK, lua: browserHeaders + `wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"customer":{"name":"Alice Example","email":"alice@example.com"},"items":[{"sku":"BK-1024","qty":2},{"sku":"BK-2048","qty":1}],"note":"Please deliver after 5pm"}'
`},
	{name: "attack-get", path: "/search?q=%3Cscript%3Ealert%28document.cookie%29%3C%2Fscript%3E&id=1%27%20OR%20%271%27%3D%271", lua: browserHeaders, want: http.StatusForbidden},
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
func measure(ctx context.Context, o options, work string, peers []*peer) (map[string]map[string]wrkResult, error) {
	results := map[string]map[string]wrkResult{}
	for _, sc := range scenarios {
		script := filepath.Join(work, sc.name+".lua")
		if err := os.WriteFile(script, []byte(sc.lua), 0o644); err != nil {
			return nil, err
		}
		runs := map[string][]wrkResult{}
		for _, p := range peers {
			if err := check(p, sc); err != nil {
				return nil, err
			}
			// Warm-up.
			if _, err := runWrk(ctx, o, p.url+sc.path, script, 2*time.Second); err != nil {
				return nil, err
			}
		}
		for range o.rounds {
			for _, p := range peers {
				r, err := runWrk(ctx, o, p.url+sc.path, script, o.duration)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", sc.name, p.name, err)
				}
				fmt.Fprintf(os.Stderr, "%-10s %-18s %8.0f req/s  p50 %-9s p99 %s\n", sc.name, p.name, r.rps, r.p50, r.p99)
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
	method, body, ct := "GET", "", ""
	if strings.Contains(sc.lua, `wrk.method = "POST"`) {
		method, ct = "POST", "application/json"
		start := strings.Index(sc.lua, "wrk.body = '") + len("wrk.body = '")
		body = sc.lua[start : start+strings.Index(sc.lua[start:], "'")]
	}
	req, err := http.NewRequest(method, p.url+sc.path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Host = "app.example.com"
	req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36")
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	req.Header.Set("Accept-Language", "en-US,en;q=0.5")
	if ct != "" {
		req.Header.Set("Content-Type", ct)
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

func runWrk(ctx context.Context, o options, url, script string, d time.Duration) (wrkResult, error) {
	wrk, err := lookPath("wrk")
	if err != nil {
		return wrkResult{}, err
	}
	args := []string{"-t", strconv.Itoa(o.threads), "-c", strconv.Itoa(o.connections), "-d", fmt.Sprintf("%ds", int(d.Seconds())), "--latency", "-s", script, url}
	out, err := exec.CommandContext(ctx, wrk, args...).CombinedOutput()
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
