package runtime_test

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/runtime"
)

// reports records what the runtime producer says is open now, per object,
// as the findings pipeline would hold it.
type reports struct {
	mu   sync.Mutex
	open map[core.ObjectKey][]core.Finding
	sets int
}

func (r *reports) Set(ref core.ResourceRef, fs []core.Finding, _ time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = map[core.ObjectKey][]core.Finding{}
	}
	r.sets++
	if len(fs) == 0 {
		delete(r.open, ref.Key())
	} else {
		r.open[ref.Key()] = fs
	}
	return true
}

func (r *reports) rules(key core.ObjectKey) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, f := range r.open[key] {
		out = append(out, f.Rule.MetricLabel())
	}
	return out
}

// verdicts records the runtime verdicts handed to the actions.
type verdicts struct {
	mu  sync.Mutex
	got []core.Verdict
}

func (v *verdicts) Offer(x core.Verdict) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.got = append(v.got, x)
}

func (v *verdicts) all() []core.Verdict {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]core.Verdict(nil), v.got...)
}

type harness struct {
	src      *runtime.Source
	metrics  *runtime.Metrics
	reports  *reports
	verdicts *verdicts
	clock    *clocktesting.FakeClock
}

// newHarness loads rulesYAML (rule files' syntax) into a real engine and a
// source over the objects of clusterYAML, a static cluster cache.
func newHarness(t *testing.T, rulesYAML string, objects []string, o runtime.Options) *harness {
	t.Helper()
	rules, errs := rule.ParseFile("rules.yaml", []byte(rulesYAML))
	if len(errs) > 0 {
		t.Fatalf("rules: %v", errs)
	}
	eng := engine.New(exprlang.New())
	var compiled []*engine.Rule
	for _, r := range rules {
		c, err := eng.Compile(r)
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		compiled = append(compiled, c)
	}
	eng.SetRules(compiled)
	var b clustercache.StaticBuilder
	for i, y := range objects {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
			t.Fatal(err)
		}
		if err := b.Add(u, "object "+string(rune('0'+i))); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{reports: &reports{}, verdicts: &verdicts{}, clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))}
	if o.Targets == nil {
		o.Targets = b.Build()
	}
	o.Engine, o.Findings, o.Verdicts, o.Clock = eng, h.reports, h.verdicts, h.clock
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	h.metrics = runtime.NewMetrics(prometheus.NewRegistry())
	h.src = runtime.NewSource(o, h.metrics)
	return h
}

// auditEvent is an audit event at ResponseComplete unless stage says
// otherwise.
func auditEvent(id, user, verb, resource, sub, ns, name string) event.Event {
	return event.Event{
		Kind: "Event", APIVersion: "audit.k8s.io/v1", Level: "Metadata", AuditID: id, Stage: event.StageResponseComplete,
		Verb: verb, User: event.UserInfo{Username: user, UID: "uid-of-" + user, Groups: []string{"system:authenticated"}},
		SourceIPs: []string{"10.0.0.7"}, UserAgent: "kubectl/v1.36.3",
		ObjectRef:      &event.ObjectRef{Resource: resource, Subresource: sub, Namespace: ns, Name: name, APIVersion: "v1"},
		ResponseStatus: &event.Status{Code: 200},
	}
}

func counter(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// queued is portal_runtime_queue_depth summed over the inputs.
func queued(t *testing.T, m *runtime.Metrics) float64 {
	t.Helper()
	var n float64
	for _, in := range []string{runtime.InputWebhook, runtime.InputFile, runtime.InputFalco} {
		n += counter(t, m.QueueDepth.WithLabelValues(in))
	}
	return n
}
