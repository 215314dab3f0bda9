package sink_test

import (
	"context"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink"
)

// testSink is a sink that exists only in this test binary, registered the
// way a new sink is: one Register call, nothing else edited.
type testSink struct{ target string }

func (s *testSink) Name() string                                     { return "testsink" }
func (s *testSink) Publish(context.Context, core.FindingBatch) error { return nil }

func init() {
	sink.Register(sink.Spec[string]{
		Name: "testsink",
		Flags: func(fs *pflag.FlagSet, target *string) {
			fs.StringVar(target, "test-sink-target", *target, "where the test sink writes; empty disables it")
		},
		Enabled: func(target string) bool { return target != "" },
		New: func(_ sink.Env, target string) ([]core.OutputSink, error) {
			return []core.OutputSink{&testSink{target: target}}, nil
		},
	})
}

// newSinks parses args as `portal run` would and builds the sinks.
func newSinks(t *testing.T, args ...string) ([]core.OutputSink, error) {
	t.Helper()
	o := sink.Defaults()
	o.Registerer = prometheus.NewRegistry()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	sink.BindFlags(fs, &o)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return sink.New(nil, o)
}

func names(sinks []core.OutputSink) []string {
	var out []string
	for _, s := range sinks {
		out = append(out, s.Name())
	}
	return out
}

func TestNew(t *testing.T) {
	sinks, err := newSinks(t, "--report-format=none", "--alertmanager-url=http://127.0.0.1:9093")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(sinks); !slices.Equal(got, []string{"alertmanager", "prometheus", "stdout"}) {
		t.Errorf("sinks %v", got)
	}
	if _, err := newSinks(t, "--report-format=none", "--alertmanager-url=alertmanager:9093"); err == nil {
		t.Error("a URL without scheme was accepted")
	}
	sinks, err = newSinks(t, "--report-format=none", "--audit-metrics=false", "--audit-log-findings=false")
	if err != nil || len(sinks) != 0 {
		t.Errorf("all off: %v, %v", names(sinks), err)
	}
}

func TestReportFormat(t *testing.T) {
	if _, err := newSinks(t, "--report-format=yaml"); err == nil {
		t.Error("an unknown report format was accepted")
	}
	if _, err := newSinks(t, "--report-format=wgpolicyk8s"); err == nil {
		t.Error("a report sink was built without a manager to write with")
	}
}

// The registration, not the sink type, decides where a sink runs: the
// violations gauge on every replica, the others on the leader; a sink with
// background work keeps it.
func TestSinksRunWhereTheirRegistrationSays(t *testing.T) {
	sinks, err := newSinks(t, "--report-format=none", "--alertmanager-url=http://127.0.0.1:9093")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, r := range sink.Registrations() {
		want[r.Name] = r.LeaderOnly
	}
	for _, s := range sinks {
		l, ok := s.(interface{ NeedLeaderElection() bool })
		if !ok || l.NeedLeaderElection() != want[s.Name()] {
			t.Errorf("%s: leader only %v, want %v", s.Name(), ok && l.NeedLeaderElection(), want[s.Name()])
		}
		if _, runs := s.(core.RunnableSink); runs != (s.Name() == "alertmanager") {
			t.Errorf("%s: RunnableSink %v", s.Name(), runs)
		}
	}
	if want["prometheus"] || !want["alertmanager"] || !want["policyreport"] || !want["stdout"] {
		t.Errorf("registrations %v", want)
	}
}

// A sink registered from a test package, with no other edit, has its flag
// bound with the others, is built by New when its flag turns it on, and is
// off by default.
func TestRegisteredSinkNeedsNoOtherEdit(t *testing.T) {
	o := sink.Defaults()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	sink.BindFlags(fs, &o)
	if f := fs.Lookup("test-sink-target"); f == nil || f.Usage != "where the test sink writes; empty disables it" {
		t.Fatalf("--test-sink-target is not bound: %+v", f)
	}
	sinks, err := newSinks(t, "--report-format=none")
	if err != nil || slices.Contains(names(sinks), "testsink") {
		t.Errorf("off by default: %v, %v", names(sinks), err)
	}
	sinks, err = newSinks(t, "--report-format=none", "--test-sink-target=/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(names(sinks), "testsink")
	if i < 0 {
		t.Fatalf("the enabled test sink was not built: %v", names(sinks))
	}
	if l := sinks[i].(interface{ NeedLeaderElection() bool }); l.NeedLeaderElection() {
		t.Error("the test sink, registered for every replica, runs on the leader only")
	}
	if o.Enabled("testsink") {
		t.Error("Enabled says the test sink is on by default")
	}
	if err := o.Parse("--test-sink-target=x"); err != nil || !o.Enabled("testsink") {
		t.Errorf("Parse did not turn the test sink on: %v", err)
	}
}

func TestRegisterRefusesDuplicates(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("a second sink named stdout was registered")
		}
	}()
	sink.Register(sink.Spec[bool]{Name: "stdout", Flags: func(*pflag.FlagSet, *bool) {}, Enabled: func(bool) bool { return false },
		New: func(sink.Env, bool) ([]core.OutputSink, error) { return nil, nil }})
}
