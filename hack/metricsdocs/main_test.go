package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/sink"
)

// The committed index is what the registered metrics give, and metrics.md
// has a section for each of them and for nothing else.
func TestMetricsIndexIsCurrent(t *testing.T) {
	if err := run("../../docs/reference/metrics-index.md", "../../docs/reference/metrics.md", true); err != nil {
		t.Error(err)
	}
}

func TestCollectReadsTypeLabelsAndHelp(t *testing.T) {
	got, err := collect(func(r prometheus.Registerer) {
		r.MustRegister(
			prometheus.NewCounterVec(prometheus.CounterOpts{Name: "portal_x_total", Help: "X \"quoted\", by a and b.",
				ConstLabels: prometheus.Labels{"format": "f"}}, []string{"a", "b"}),
			prometheus.NewGauge(prometheus.GaugeOpts{Name: "portal_y", Help: "Y."}),
			prometheus.NewHistogram(prometheus.HistogramOpts{Name: "portal_z_seconds", Help: "Z."}),
		)
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []metric{
		{Name: "portal_x_total", Type: "counter", Help: `X "quoted", by a and b.`, Labels: []string{"format", "a", "b"}},
		{Name: "portal_y", Type: "gauge", Help: "Y."},
		{Name: "portal_z_seconds", Type: "histogram", Help: "Z."},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Type != want[i].Type || got[i].Help != want[i].Help ||
			strings.Join(got[i].Labels, ",") != strings.Join(want[i].Labels, ",") {
			t.Errorf("metric %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Two collectors with one name fail as they would at Portal's start.
func TestCollectRefusesClash(t *testing.T) {
	_, err := collect(func(r prometheus.Registerer) {
		r.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "portal_y", Help: "Y."}),
			prometheus.NewGauge(prometheus.GaugeOpts{Name: "portal_y", Help: "Y."}))
	})
	if err == nil {
		t.Error("no error for two metrics named portal_y")
	}
}

func TestCrossCheck(t *testing.T) {
	ref := []byte("# Metrics\n\n### portal_a\n\ntext\n\n### portal_gone_total\n")
	err := crossCheck([]string{"portal_a", "portal_new"}, ref, "metrics.md")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`no section "### portal_new"`, "documents portal_gone_total, which Portal does not register"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := crossCheck([]string{"portal_a"}, []byte("### portal_a\n"), "metrics.md"); err != nil {
		t.Errorf("matching pages: %v", err)
	}
}

// A sink added to the registry has its metrics in the index, and metrics.md
// must document them, with no edit to this generator: the sinks' metrics
// are derived from sink.Registrations().
func TestNewSinkMetricsAreIndexed(t *testing.T) {
	test := sink.Describe(sink.Spec[bool]{
		Name:    "testsink",
		Flags:   func(*pflag.FlagSet, *bool) {},
		Enabled: func(bool) bool { return false },
		New:     func(sink.Env, bool) ([]core.OutputSink, error) { return nil, nil },
		Metrics: func(r prometheus.Registerer) {
			r.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "portal_testsink_writes_total", Help: "Writes of the test sink."}))
		},
	})
	layers := manager.MetricsSectionsWith(append(sink.Registrations(), test))
	var names []string
	for _, l := range layers {
		ms, err := collect(l.Register)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			names = append(names, m.Name)
			if m.Name == "portal_testsink_writes_total" && l.Anchor != "audit" {
				t.Errorf("the test sink's metric is listed under %s", l.Name)
			}
		}
	}
	if !slices.Contains(names, "portal_testsink_writes_total") {
		t.Fatal("the registered test sink's metric is not in the index")
	}
	ref, err := os.ReadFile("../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	if err := crossCheck(names, ref, "metrics.md"); err == nil || !strings.Contains(err.Error(), `no section "### portal_testsink_writes_total"`) {
		t.Errorf("metrics.md was not asked to document the test sink's metric: %v", err)
	}
	// Every sink Portal registers has its metrics indexed.
	for _, want := range []string{"portal_audit_violations", "portal_policyreport_writes_total", "portal_alertmanager_alerts_sent_total"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s is not in the index", want)
		}
	}
}
