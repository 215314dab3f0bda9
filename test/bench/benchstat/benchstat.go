//go:build linux

// Package benchstat is what the benchmarks under test/bench share: latency
// summaries, Prometheus text scrapes and histogram quantiles, and the
// process and machine facts a report states.
package benchstat

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Quantile returns the q-quantile of sorted by the nearest-rank method.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func Mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// Latencies summarises latencies: count, mean, p50, p95, p99 and max.
type Latencies struct {
	N                   int
	Mean, P50, P95, P99 time.Duration
	Max                 time.Duration
}

func Summarise(d []time.Duration) Latencies {
	s := slices.Clone(d)
	slices.Sort(s)
	l := Latencies{N: len(s), Mean: Mean(s), P50: Quantile(s, 0.50), P95: Quantile(s, 0.95), P99: Quantile(s, 0.99)}
	if len(s) > 0 {
		l.Max = s[len(s)-1]
	}
	return l
}

// Metrics is a scrape in the Prometheus text format: sample lines by name.
type Metrics map[string][]Sample

type Sample struct {
	Labels string // the text between the braces
	Value  float64
}

func ParseMetrics(text string) Metrics {
	m := Metrics{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		var name, labels, rest string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, labels, rest = line[:i], line[i+1:j], line[j+1:]
		} else {
			var ok bool
			if name, rest, ok = strings.Cut(line, " "); !ok {
				continue
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		m[name] = append(m[name], Sample{Labels: labels, Value: v})
	}
	return m
}

// Sum adds the samples of name whose labels contain every one of with
// (written as `key="value"`).
func (m Metrics) Sum(name string, with ...string) float64 {
	var total float64
	for _, s := range m[name] {
		ok := true
		for _, w := range with {
			ok = ok && strings.Contains(s.Labels, w)
		}
		if ok {
			total += s.Value
		}
	}
	return total
}

// Delta is after minus before for the summed samples.
func Delta(before, after Metrics, name string, with ...string) float64 {
	return after.Sum(name, with...) - before.Sum(name, with...)
}

// Bucket is one cumulative bucket of a histogram.
type Bucket struct {
	LE    float64
	Count float64
}

// HistogramDelta returns the cumulative buckets of histogram name gained
// between the two scrapes, ordered by upper bound.
func HistogramDelta(before, after Metrics, name string) []Bucket {
	read := func(m Metrics) map[float64]float64 {
		out := map[float64]float64{}
		for _, s := range m[name+"_bucket"] {
			_, le, ok := strings.Cut(s.Labels, `le="`)
			if !ok {
				continue
			}
			le, _, _ = strings.Cut(le, `"`)
			bound, err := strconv.ParseFloat(le, 64)
			if err != nil {
				continue
			}
			out[bound] += s.Value
		}
		return out
	}
	b, a := read(before), read(after)
	var out []Bucket
	for le, n := range a {
		out = append(out, Bucket{LE: le, Count: n - b[le]})
	}
	slices.SortFunc(out, func(x, y Bucket) int {
		switch {
		case x.LE < y.LE:
			return -1
		case x.LE > y.LE:
			return 1
		}
		return 0
	})
	return out
}

// HistogramQuantile estimates the q-quantile from cumulative buckets the way
// PromQL's histogram_quantile does: linear interpolation inside the bucket
// that holds the rank, the lowest bucket starting at 0. It also returns the
// upper bound of that bucket, a bound the quantile cannot exceed.
func HistogramQuantile(q float64, buckets []Bucket) (estimate, upper float64) {
	if len(buckets) == 0 || buckets[len(buckets)-1].Count == 0 {
		return math.NaN(), math.NaN()
	}
	total := buckets[len(buckets)-1].Count
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range buckets {
		if b.Count >= rank {
			if math.IsInf(b.LE, 1) {
				return lower, b.LE
			}
			if b.Count == below {
				return b.LE, b.LE
			}
			return lower + (b.LE-lower)*(rank-below)/(b.Count-below), b.LE
		}
		lower, below = b.LE, b.Count
	}
	return lower, math.Inf(1)
}

// ProcStatus reads the memory fields (VmRSS, VmHWM, RssAnon, RssFile...), in
// kB, from /proc/<pid>/status.
func ProcStatus(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || !(strings.HasPrefix(key, "Vm") || strings.HasPrefix(key, "Rss")) {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 2 && fields[1] == "kB" {
			if n, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
				out[key] = n
			}
		}
	}
	return out, sc.Err()
}

// Machine describes the host for the report.
func Machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// LoadAverage is the first three fields of /proc/loadavg.
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// EnvInt reads a positive integer setting from the environment, or def.
func EnvInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return def
}

// HTTPGet fetches url and returns its status and body.
func HTTPGet(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// ScrapeAPIServer reads kube-apiserver's own /metrics.
func ScrapeAPIServer(ctx context.Context, cs kubernetes.Interface) (Metrics, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	return ParseMetrics(string(body)), nil
}
