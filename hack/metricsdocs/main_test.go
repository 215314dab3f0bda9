package main

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
