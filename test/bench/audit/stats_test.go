//go:build linux

package audit_test

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// quantile returns the q-quantile of sorted by the nearest-rank method.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// latencies summarises the create latencies of one configuration.
type latencies struct {
	n                   int
	mean, p50, p95, p99 time.Duration
	max                 time.Duration
}

func summarise(d []time.Duration) latencies {
	s := slices.Clone(d)
	slices.Sort(s)
	l := latencies{n: len(s), mean: mean(s), p50: quantile(s, 0.50), p95: quantile(s, 0.95), p99: quantile(s, 0.99)}
	if len(s) > 0 {
		l.max = s[len(s)-1]
	}
	return l
}

// metrics is a scrape in the Prometheus text format: sample lines by name.
type metrics map[string][]sample

type sample struct {
	labels string // the text between the braces
	value  float64
}

func parseMetrics(text string) metrics {
	m := metrics{}
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
		m[name] = append(m[name], sample{labels: labels, value: v})
	}
	return m
}

// sum adds the samples of name whose labels contain every one of with
// (written as `key="value"`).
func (m metrics) sum(name string, with ...string) float64 {
	var total float64
	for _, s := range m[name] {
		ok := true
		for _, w := range with {
			ok = ok && strings.Contains(s.labels, w)
		}
		if ok {
			total += s.value
		}
	}
	return total
}

// delta is after minus before for the summed samples.
func delta(before, after metrics, name string, with ...string) float64 {
	return after.sum(name, with...) - before.sum(name, with...)
}

// bucket is one cumulative bucket of a histogram.
type bucket struct {
	le    float64
	count float64
}

// histogramDelta returns the cumulative buckets of histogram name gained
// between the two scrapes, ordered by upper bound.
func histogramDelta(before, after metrics, name string) []bucket {
	read := func(m metrics) map[float64]float64 {
		out := map[float64]float64{}
		for _, s := range m[name+"_bucket"] {
			_, le, ok := strings.Cut(s.labels, `le="`)
			if !ok {
				continue
			}
			le, _, _ = strings.Cut(le, `"`)
			bound, err := strconv.ParseFloat(le, 64)
			if err != nil {
				continue
			}
			out[bound] += s.value
		}
		return out
	}
	b, a := read(before), read(after)
	var out []bucket
	for le, n := range a {
		out = append(out, bucket{le: le, count: n - b[le]})
	}
	slices.SortFunc(out, func(x, y bucket) int {
		switch {
		case x.le < y.le:
			return -1
		case x.le > y.le:
			return 1
		}
		return 0
	})
	return out
}

// histogramQuantile estimates the q-quantile from cumulative buckets the way
// PromQL's histogram_quantile does: linear interpolation inside the bucket
// that holds the rank, the lowest bucket starting at 0. It also returns the
// upper bound of that bucket, a bound the quantile cannot exceed.
func histogramQuantile(q float64, buckets []bucket) (estimate, upper float64) {
	if len(buckets) == 0 || buckets[len(buckets)-1].count == 0 {
		return math.NaN(), math.NaN()
	}
	total := buckets[len(buckets)-1].count
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range buckets {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return lower, b.le
			}
			if b.count == below {
				return b.le, b.le
			}
			return lower + (b.le-lower)*(rank-below)/(b.count-below), b.le
		}
		lower, below = b.le, b.count
	}
	return lower, math.Inf(1)
}

// procStatus reads the memory fields (VmRSS, VmHWM, RssAnon, RssFile...), in
// kB, from /proc/<pid>/status.
func procStatus(pid int) (map[string]int64, error) {
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

// machine describes the host for the report.
func machine() string {
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

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
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
