package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// benchCRS is the full CRS at paranoia level 1, blocking, as
// examples/waf/crs.yaml sets it up.
const benchCRS = "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nInclude @owasp_crs/*.conf\nSecRuleEngine On\nSecAuditEngine Off\n"

// benchPage is the upstream's answer: a small HTML page the response rules
// inspect.
var benchPage = "<!doctype html><html><body>" + strings.Repeat("<p>Lorem ipsum dolor sit amet.</p>", 32) + "</body></html>"

// benchForm is a benign 10 KB urlencoded form of 40 fields, as in
// `make bench-waf`.
var benchForm = func() string {
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

// BenchmarkProxyCRS measures a request through the waf-proxy with the full
// CRS, in process (client, proxy and upstream share the CPUs): a benign
// GET, a JSON POST and an attack the CRS blocks. `make bench-waf` compares
// the proxy with nginx and ModSecurity out of process.
func BenchmarkProxyCRS(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, benchPage)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	p := &Proxy{Upstream: u, Logger: discard()}
	if err := p.Load(Revision{UUID: "bench", Bundle: bundle(benchCRS)}); err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	front := httptest.NewServer(p)
	defer front.Close()
	for _, sc := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"benign-get", "GET", "/shop/products?category=books&page=2", "", 200},
		{"json-post", "POST", "/api/orders", `{"customer":{"name":"Alice"},"items":[{"sku":"BK-1024","qty":2}],"note":"after 5pm"}`, 200},
		{"form-post", "POST", "/account/profile", benchForm, 200},
		{"attack-get", "GET", "/search?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E", "", 403},
	} {
		b.Run(sc.name, func(b *testing.B) {
			client := front.Client()
			client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					ct := "application/json"
					if sc.body == benchForm {
						ct = "application/x-www-form-urlencoded"
					}
					code, _, err := send(client, sc.method, front.URL+sc.path, sc.body,
						"Content-Type", ct, "Accept", "text/html", "User-Agent", "Mozilla/5.0", "Host", "app.example.com")
					if err != nil || code != sc.want {
						b.Fatalf("%d %v, want %d", code, err, sc.want)
					}
				}
			})
		})
	}
}

// BenchmarkPropagation measures the time from a RuleSource update in the
// API server to the waf-proxy enforcing it: Portal's reconcile and compile
// (reported as ms-to-cache) plus the proxy's poll (1 s interval) and
// compile. The whole is ms/propagation; p50 and max over the iterations
// are reported too. Each edit starts at a random point of the poll
// interval, so the poll wait averages half an interval.
func BenchmarkPropagation(b *testing.B) {
	portal(b)
	ns := guardedRuleSet(b, "waf-proxy-propagation", "word0")
	h := newHarness(b, nil)
	poller := &Poller{Client: clusterEnv.cache, Namespace: ns, Name: "guard", Interval: MinPollInterval, Target: h.proxy, Logger: discard()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = poller.Run(ctx) }()
	waitBlocked(b, h, "word0", time.Minute)

	var total, toCache []time.Duration
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		// Start at a random point of the poll interval, as an edit would.
		b.StopTimer()
		<-time.After(rand.N(MinPollInterval))
		b.StartTimer()
		word := fmt.Sprintf("word%d", i)
		before, err := clusterEnv.cache.Latest(ctx, ns, "guard")
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		setTuning(b, ns, word)
		cached := time.Duration(0)
		tick := time.NewTicker(5 * time.Millisecond)
		for ; ; <-tick.C {
			if cached == 0 {
				if l, err := clusterEnv.cache.Latest(ctx, ns, "guard"); err == nil && l.UUID != before.UUID {
					cached = time.Since(start)
				}
			}
			if code, err := status(h, word); err == nil && code == 403 {
				break
			}
			if time.Since(start) > 30*time.Second {
				b.Fatalf("%s not enforced after 30s", word)
			}
		}
		tick.Stop()
		total = append(total, time.Since(start))
		toCache = append(toCache, cached)
	}
	b.StopTimer()
	b.ReportMetric(ms(mean(total)), "ms/propagation")
	b.ReportMetric(ms(percentile(total, 50)), "p50-ms")
	b.ReportMetric(ms(slices.Max(total)), "max-ms")
	b.ReportMetric(ms(mean(toCache)), "ms-to-cache")
}

func waitBlocked(b *testing.B, h *harness, word string, d time.Duration) {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		if code, err := status(h, word); err == nil && code == 403 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not enforced after %s", word, d)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mean(ds []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}
