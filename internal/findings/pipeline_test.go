package findings

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vilaca/portal/internal/core"
)

var (
	ruleA = &core.Rule{Name: "a", Severity: core.SeverityHigh, Source: core.Source{Kind: "PortalClusterRule", Name: "a"}}
	ruleB = &core.Rule{Name: "b", Severity: core.SeverityLow, Source: core.Source{Kind: "file", Path: "b.yaml"}}
)

func ref(name string) core.ResourceRef {
	return core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: name, UID: "uid-" + name}
}

func fail(r *core.Rule, obj core.ResourceRef, container, msg string, at time.Time) core.Finding {
	return core.Finding{Result: core.Result{Rule: r, Resource: obj, Outcome: core.OutcomeFail, Container: container, Message: msg}, FirstSeen: at}
}

type fakeCounter struct {
	mu         sync.Mutex
	violations map[string]int
}

func (f *fakeCounter) Evaluated(*core.Rule) {}
func (f *fakeCounter) SetViolations(r *core.Rule, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.violations[r.Name] = n
}

func next(t *testing.T, sub *Subscription, max int) core.FindingBatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b, err := sub.Next(ctx, max)
	if err != nil {
		t.Fatalf("no batch: %v", err)
	}
	return b
}

// noManager takes the sink runners of pipelines built without sinks.
type noManager struct{}

func (noManager) Add(manager.Runnable) error { return nil }

func newPipeline(t *testing.T) *Pipeline {
	t.Helper()
	p, err := New(noManager{}, Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func register(t *testing.T, p *Pipeline, name string, counter RuleCounter) *Producer {
	t.Helper()
	pr, err := p.Register(name, ProducerOptions{Counter: counter})
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

func TestProducerKeepsFirstSeenAndCounts(t *testing.T) {
	cnt := &fakeCounter{violations: map[string]int{}}
	s := register(t, newPipeline(t), "audit", cnt)
	t0 := time.Unix(1000, 0)
	if !s.Set(ref("p"), []core.Finding{fail(ruleA, ref("p"), "c1", "m", t0), fail(ruleA, ref("p"), "c2", "m", t0)}, t0) {
		t.Fatal("first findings not recorded")
	}
	// Re-evaluation later: same findings, later FirstSeen: nothing changes.
	t1 := t0.Add(time.Minute)
	if s.Set(ref("p"), []core.Finding{fail(ruleA, ref("p"), "c1", "m", t1), fail(ruleA, ref("p"), "c2", "m", t1)}, t1) {
		t.Error("identical findings reported as a change")
	}
	// One container fixed, a new rule fails: FirstSeen of c1 kept.
	fs := []core.Finding{fail(ruleA, ref("p"), "c1", "m", t1), fail(ruleB, ref("p"), "", "n", t1)}
	if !s.Set(ref("p"), fs, t1) {
		t.Fatal("change not recorded")
	}
	got := s.Snapshot()[0].Findings
	if !got[0].FirstSeen.Equal(t0) || !got[1].FirstSeen.Equal(t1) {
		t.Errorf("FirstSeen = %v, %v; want %v, %v", got[0].FirstSeen, got[1].FirstSeen, t0, t1)
	}
	if cnt.violations["a"] != 1 || cnt.violations["b"] != 1 {
		t.Errorf("violations = %v", cnt.violations)
	}
	s.Delete(ref("p").Key(), t1)
	if s.Len() != 0 || cnt.violations["a"] != 0 {
		t.Errorf("after delete: %d objects, violations %v", s.Len(), cnt.violations)
	}
}

func TestSubscriptionCoalescesAndRetries(t *testing.T) {
	p := newPipeline(t)
	s := register(t, p, "audit", nil)
	now := time.Now()
	s.Set(ref("old"), []core.Finding{fail(ruleA, ref("old"), "", "m", now)}, now)
	sub := p.Subscribe()
	defer sub.Close()
	b := next(t, sub, 1)
	if !b.Full || len(b.Objects) != 1 {
		t.Fatalf("first batch: full=%v objects=%d, want the full state", b.Full, len(b.Objects))
	}
	// Three changes of one object and one of another: two entries, the
	// latest state, the earliest observation time.
	early := now.Add(time.Second)
	s.Set(ref("x"), []core.Finding{fail(ruleA, ref("x"), "", "m1", early)}, early)
	s.Set(ref("x"), []core.Finding{fail(ruleA, ref("x"), "", "m2", early)}, early.Add(time.Second))
	s.Set(ref("y"), []core.Finding{fail(ruleA, ref("y"), "", "m", early)}, early)
	s.Delete(ref("old").Key(), early)
	if n := sub.Pending(); n != 3 {
		t.Fatalf("pending = %d, want 3", n)
	}
	b = next(t, sub, 2)
	if b.Full || len(b.Objects) != 2 {
		t.Fatalf("batch: full=%v objects=%d, want 2 changes", b.Full, len(b.Objects))
	}
	b2 := next(t, sub, 10)
	all := append(b.Objects, b2.Objects...)
	seen := map[string]core.ObjectFindings{}
	for _, of := range all {
		seen[of.Object.Name] = of
	}
	if x := seen["x"]; len(x.Findings) != 1 || x.Findings[0].Message != "m2" || !x.Observed.Equal(early) {
		t.Errorf("x = %+v, want its latest findings observed at %v", x, early)
	}
	if old, ok := seen["old"]; !ok || len(old.Findings) != 0 {
		t.Errorf("deleted object: %+v, want an entry without findings", old)
	}
	// A failed publish comes back, and a failed full batch is full again.
	sub.Retry(core.FindingBatch{Full: true})
	if b := next(t, sub, 10); !b.Full || len(b.Objects) != 2 {
		t.Errorf("retried full batch: full=%v objects=%d", b.Full, len(b.Objects))
	}
}

// names lists "producer/rule/object/container" of the findings in a batch.
func names(objs []core.ObjectFindings) map[string]bool {
	out := map[string]bool{}
	for _, of := range objs {
		for _, f := range of.Findings {
			out[f.Producer+"/"+f.RuleName()+"/"+of.Object.Name+"/"+f.Container] = true
		}
	}
	return out
}

func keys(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// A full batch of one producer replaces its own findings and leaves every
// other producer's, on other objects and on the same ones.
func TestFullBatchResetsOnlyItsProducer(t *testing.T) {
	p := newPipeline(t)
	audit := register(t, p, "audit", nil)
	other := register(t, p, "network", nil)
	now := time.Now()
	audit.Set(ref("shared"), []core.Finding{fail(ruleA, ref("shared"), "", "m", now)}, now)
	audit.Set(ref("a"), []core.Finding{fail(ruleA, ref("a"), "", "m", now)}, now)
	other.Publish(core.FindingBatch{Full: true, Objects: []core.ObjectFindings{
		{Object: ref("shared"), Findings: []core.Finding{fail(ruleA, ref("shared"), "", "m", now)}},
		{Object: ref("n"), Findings: []core.Finding{fail(ruleB, ref("n"), "", "m", now)}},
	}})
	sub := p.Subscribe()
	defer sub.Close()
	if got, want := keys(names(next(t, sub, 0).Objects)), "audit/a/a/ audit/a/shared/ network/a/shared/ network/b/n/"; got != want {
		t.Fatalf("full state %q, want %q", got, want)
	}

	// The other producer's new full state: nothing on "shared" or "n".
	other.Publish(core.FindingBatch{Full: true, Objects: []core.ObjectFindings{
		{Object: ref("m"), Findings: []core.Finding{fail(ruleB, ref("m"), "", "m", now)}},
	}})
	if got, want := keys(names(p.Snapshot())), "audit/a/a/ audit/a/shared/ network/b/m/"; got != want {
		t.Errorf("after network's full batch: %q, want %q", got, want)
	}
	b := next(t, sub, 0)
	if b.Full {
		t.Fatal("a producer's full batch made the sinks' batch full: they would drop every other producer's findings they hold")
	}
	if got, want := keys(names(b.Objects)), "audit/a/shared/ network/b/m/"; got != want {
		t.Errorf("changed objects carry %q, want %q (shared keeps audit's finding, n has none)", got, want)
	}

	// Audit's empty full state and a DeleteFunc over everything leave the
	// other producer's findings.
	audit.DeleteFunc(func(core.ObjectKey) bool { return true }, now)
	if got, want := keys(names(p.Snapshot())), "network/b/m/"; got != want {
		t.Errorf("after audit's DeleteFunc: %q, want %q", got, want)
	}
	audit.Set(ref("m"), []core.Finding{fail(ruleA, ref("m"), "", "m", now)}, now)
	audit.Publish(core.FindingBatch{Full: true})
	if got, want := keys(names(p.Snapshot())), "network/b/m/"; got != want {
		t.Errorf("after audit's empty full batch: %q, want %q", got, want)
	}
	if audit.Len() != 0 || other.Len() != 1 {
		t.Errorf("objects per producer: audit %d, network %d; want 0, 1", audit.Len(), other.Len())
	}
	if got := testutil.ToFloat64(p.Metrics().Objects.WithLabelValues("network")); got != 1 {
		t.Errorf("portal_findings_objects{producer=network} = %v, want 1", got)
	}
}

// A producer cannot publish findings under another producer's name.
func TestProducerStampsItsName(t *testing.T) {
	p := newPipeline(t)
	pr := register(t, p, "audit", nil)
	f := fail(ruleA, ref("x"), "", "m", time.Now())
	f.Producer = "network"
	pr.Set(ref("x"), []core.Finding{f}, time.Now())
	if got := p.Snapshot()[0].Findings[0].Producer; got != "audit" {
		t.Errorf("finding published by audit carries producer %q", got)
	}
}

func TestRegister(t *testing.T) {
	p := newPipeline(t)
	register(t, p, "audit", nil)
	for _, name := range []string{"", "Audit", "audit", "-x", "x-", "a/b", strings.Repeat("a", 33)} {
		if _, err := p.Register(name, ProducerOptions{}); err == nil {
			t.Errorf("producer %q registered", name)
		}
	}
	for _, name := range []string{"x", "a-b", strings.Repeat("a", 32)} {
		if _, err := p.Register(name, ProducerOptions{}); err != nil {
			t.Errorf("producer %q refused: %v", name, err)
		}
	}
	if !p.waitSynced(nil) {
		t.Fatal("no producer to wait for, yet not synced")
	}
	if _, err := p.Register("late", ProducerOptions{}); err == nil || !strings.Contains(err.Error(), "after the sinks started") {
		t.Errorf("registration after start: %v", err)
	}
}
