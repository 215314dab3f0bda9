package sink_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/sink"
)

func TestNew(t *testing.T) {
	sinks, err := sink.New(nil, sink.Options{AlertmanagerURL: "http://127.0.0.1:9093", Prometheus: true, Stdout: true, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range sinks {
		names = append(names, s.Name())
	}
	if len(names) != 3 || names[0] != "alertmanager" || names[1] != "prometheus" || names[2] != "stdout" {
		t.Errorf("sinks %v", names)
	}
	if _, err := sink.New(nil, sink.Options{AlertmanagerURL: "alertmanager:9093", Registerer: prometheus.NewRegistry()}); err == nil {
		t.Error("a URL without scheme was accepted")
	}
}

func TestReportFormat(t *testing.T) {
	if _, err := sink.New(nil, sink.Options{ReportFormat: "yaml", Registerer: prometheus.NewRegistry()}); err == nil {
		t.Error("an unknown report format was accepted")
	}
	sinks, err := sink.New(nil, sink.Options{ReportFormat: sink.ReportsNone, Registerer: prometheus.NewRegistry()})
	if err != nil || len(sinks) != 0 {
		t.Errorf("none: %d sinks, %v", len(sinks), err)
	}
}
