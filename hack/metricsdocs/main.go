// Command metricsdocs writes the metrics index (docs/reference/metrics-index.md)
// from the metrics Portal registers: for each section manager.MetricsSections
// lists (the shared components, then each registered layer, and the sinks
// from the sink registry) it calls the metric constructors with a fresh
// registry, as the layers do at start, and lists each
// metric's name, type, labels and help. Every metric must also have its own
// section in docs/reference/metrics.md (a "### <name>" heading) and every such
// heading must name a registered metric, so neither page can miss a new metric
// or keep a removed one. `make docs-generate` writes the index, `make docs`
// (-check) fails when it is stale or the two pages disagree.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vilaca/portal/internal/manager"
)

// metric is one row of the index.
type metric struct {
	Name, Type, Help string
	Labels           []string
}

func main() {
	out := flag.String("out", "docs/reference/metrics-index.md", "the index page to write")
	ref := flag.String("reference", "docs/reference/metrics.md", "the metrics reference, which must have a section per metric")
	check := flag.Bool("check", false, "do not write: fail when the index differs from what would be written")
	flag.Parse()
	if err := run(*out, *ref, *check); err != nil {
		fmt.Fprintln(os.Stderr, "metricsdocs:", err)
		os.Exit(1)
	}
}

func run(outPath, refPath string, check bool) error {
	layers := manager.MetricsSections()
	sections := make([][]metric, len(layers))
	var all []string
	for i, l := range layers {
		ms, err := collect(l.Register)
		if err != nil {
			return fmt.Errorf("%s: %w", l.Name, err)
		}
		sections[i] = ms
		for _, m := range ms {
			all = append(all, m.Name)
		}
	}
	ref, err := os.ReadFile(refPath)
	if err != nil {
		return err
	}
	if err := crossCheck(all, ref, refPath); err != nil {
		return err
	}
	page := render(layers, sections)
	if !check {
		return os.WriteFile(outPath, page, 0o644)
	}
	current, err := os.ReadFile(outPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !bytes.Equal(current, page) {
		return fmt.Errorf("%s is out of date with the metrics Portal registers: run make docs-generate and commit it", outPath)
	}
	return nil
}

var heading = regexp.MustCompile(`(?m)^### (portal_[a-z0-9_]+)\s*$`)

// crossCheck fails unless the reference has one section per registered
// metric and none for a metric that is not registered.
func crossCheck(registered []string, ref []byte, refPath string) error {
	var documented []string
	for _, m := range heading.FindAllSubmatch(ref, -1) {
		documented = append(documented, string(m[1]))
	}
	var errs []error
	for _, n := range registered {
		if !slices.Contains(documented, n) {
			errs = append(errs, fmt.Errorf("%s has no section \"### %s\": document the metric there", refPath, n))
		}
	}
	for _, n := range documented {
		if !slices.Contains(registered, n) {
			errs = append(errs, fmt.Errorf("%s documents %s, which Portal does not register: remove or rename the section", refPath, n))
		}
	}
	return errors.Join(errs...)
}

// recorder is a Registerer that keeps what is registered with it.
type recorder struct{ collectors []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

// collect runs register against a recorder and describes what it registered,
// in registration order. A fresh prometheus.Registry also registers each
// collector, so a clash or an invalid name fails here as it would at start.
func collect(register func(prometheus.Registerer)) ([]metric, error) {
	rec := &recorder{}
	register(rec)
	reg := prometheus.NewPedanticRegistry()
	var out []metric
	for _, c := range rec.collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
		typ, err := typeOf(c)
		if err != nil {
			return nil, err
		}
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m, err := parseDesc(d.String())
			if err != nil {
				return nil, err
			}
			m.Type = typ
			out = append(out, m)
		}
	}
	return out, nil
}

// typeOf is the Prometheus type of a collector. A vector may have no series
// yet, so vectors are known by their Go type; any other collector is asked
// for a sample.
func typeOf(c prometheus.Collector) (string, error) {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter", nil
	case *prometheus.GaugeVec:
		return "gauge", nil
	case *prometheus.HistogramVec:
		return "histogram", nil
	case *prometheus.SummaryVec:
		return "summary", nil
	}
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	var typ string
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			return "", err
		}
		switch {
		case pb.Counter != nil:
			typ = "counter"
		case pb.Gauge != nil:
			typ = "gauge"
		case pb.Histogram != nil:
			typ = "histogram"
		case pb.Summary != nil:
			typ = "summary"
		}
	}
	if typ == "" {
		return "", fmt.Errorf("cannot tell the type of %T: it is not a vector and collects no sample", c)
	}
	return typ, nil
}

// Desc has no accessors; its String is the only view of its fields.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

func parseDesc(s string) (metric, error) {
	m := descRE.FindStringSubmatch(s)
	if m == nil {
		return metric{}, fmt.Errorf("unexpected metric description %s", s)
	}
	name, err1 := strconv.Unquote(m[1])
	help, err2 := strconv.Unquote(m[2])
	if err := errors.Join(err1, err2); err != nil {
		return metric{}, fmt.Errorf("metric description %s: %w", s, err)
	}
	var labels []string
	if m[3] != "" {
		for _, pair := range strings.Split(m[3], ",") {
			labels = append(labels, strings.SplitN(pair, "=", 2)[0])
		}
	}
	if m[4] != "" {
		for _, l := range strings.Split(m[4], ",") {
			labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
		}
	}
	return metric{Name: name, Help: help, Labels: labels}, nil
}

func render(layers []manager.MetricsSection, sections [][]metric) []byte {
	var b strings.Builder
	b.WriteString(`<!-- Generated by hack/metricsdocs from the metrics Portal registers: change a metric in
its package and run make docs-generate; make docs fails when this page is stale. -->

# Metrics index

Every metric Portal registers, by layer, with its type, labels and help text, as
` + "`/metrics`" + ` shows them. Each name links to its section of the
[metrics reference](metrics.md), which says when it moves and what to alert on.
`)
	for i, l := range layers {
		fmt.Fprintf(&b, "\n## %s\n\nSee [%s](metrics.md#%s).\n\n| metric | type | labels | help |\n|---|---|---|---|\n", l.Name, l.Name, l.Anchor)
		for _, m := range sections[i] {
			labels := make([]string, len(m.Labels))
			for j, lb := range m.Labels {
				labels[j] = "`" + lb + "`"
			}
			fmt.Fprintf(&b, "| [`%s`](metrics.md#%s) | %s | %s | %s |\n", m.Name, m.Name, m.Type, strings.Join(labels, ", "), cell(m.Help))
		}
	}
	return []byte(b.String())
}

func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}
