package audit

import (
	"context"
	"sync"
	"testing"
	"time"

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

func TestStoreKeepsFirstSeenAndCounts(t *testing.T) {
	cnt := &fakeCounter{violations: map[string]int{}}
	s := NewStore(cnt)
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
	s := NewStore(nil)
	now := time.Now()
	s.Set(ref("old"), []core.Finding{fail(ruleA, ref("old"), "", "m", now)}, now)
	sub := s.Subscribe()
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
