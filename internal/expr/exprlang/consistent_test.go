package exprlang

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/vilaca/portal/internal/core"
)

// apiCluster stands in for the API server behind cluster.consistent.*: every
// read returns a fresh object of size bytes, as a decoded response is, and
// is counted. List returns count such objects, paging through the budget
// the way internal/lookup's API reader does when pages is set.
type apiCluster struct {
	size, count int
	pages       bool
	reads       int
}

var _ Cluster = (*apiCluster)(nil)

func (a *apiCluster) object(name string) map[string]any {
	return map[string]any{"metadata": map[string]any{"namespace": "t", "name": name},
		"data": map[string]any{"k": strings.Repeat("x", a.size)}}
}

func (a *apiCluster) ByName(_ context.Context, _ string, _ bool, _, name string) (map[string]any, error) {
	a.reads++
	return a.object(name), nil
}

func (a *apiCluster) List(_ context.Context, _ string, _ bool, _ string, _ labels.Selector, budget core.ReadBudget) ([]any, error) {
	var out []any
	for i := range a.count {
		if a.pages && i > 0 {
			if err := budget.Request(); err != nil {
				return nil, err
			}
		}
		a.reads++
		o := a.object("o")
		if a.pages {
			if err := budget.Charge([]map[string]any{o}); err != nil {
				return nil, err
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// budgetKind evaluates expr against c and returns the kind of budget error
// it ended in ("" for none).
func budgetKind(t *testing.T, expr string, c Cluster) (core.BudgetKind, error) {
	t.Helper()
	p, err := testEngine().Compile(expr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Eval(context.Background(), map[string]any{"cluster": c})
	if be, ok := errors.AsType[*core.BudgetError](err); ok {
		return be.Kind, err
	}
	return "", err
}

// TestConsistentReadsAreCapped: a rule may make MaxConsistentReads
// consistent reads; the next one is a budget error naming the limit, and it
// is never made.
func TestConsistentReadsAreCapped(t *testing.T) {
	c := &apiCluster{size: 10}
	if kind, err := budgetKind(t, `len(map(1..16, {cluster.consistent.configmaps.byName("t", "c")})) == 16`, c); err != nil {
		t.Fatalf("16 reads: %s %v, want no error", kind, err)
	}
	c = &apiCluster{size: 10}
	kind, err := budgetKind(t, `len(map(1..990, {cluster.consistent.configmaps.byName("t", "c")})) > 0`, c)
	if kind != core.BudgetAPIReads || !strings.Contains(err.Error(), "more than 16 reads") {
		t.Errorf("990 reads: error %v, want the read budget of 16", err)
	}
	if c.reads != MaxConsistentReads {
		t.Errorf("%d reads made, want %d", c.reads, MaxConsistentReads)
	}
	// Cached lookups are not API reads.
	c = &apiCluster{size: 10}
	if kind, err := budgetKind(t, `len(map(1..100, {cluster.configmaps.byName("t", "c")})) == 100`, c); err != nil {
		t.Errorf("100 cached reads: %s %v, want no error", kind, err)
	}
}

// TestConsistentReadsPayForWhatTheyRead: objects read from the API server
// are decoded for the rule alone, so their bytes count against the byte
// budget as they arrive: eight 1 MiB objects exhaust the default 8 MiB
// well before the read cap. The repro of the audit took 989 reads and
// ~990 MiB of heap in one evaluation.
func TestConsistentReadsPayForWhatTheyRead(t *testing.T) {
	c := &apiCluster{size: 1 << 20}
	kind, err := budgetKind(t, `len(map(1..990, {cluster.consistent.configmaps.byName("t", "big")})) > 0`, c)
	if kind != core.BudgetBytes {
		t.Errorf("byName of 1 MiB in a loop: error %v, want the byte budget", err)
	}
	if c.reads != 8 {
		t.Errorf("%d reads made, want 8 (8 MiB)", c.reads)
	}
	for _, pages := range []bool{false, true} {
		c = &apiCluster{size: 1 << 20, count: 12, pages: pages}
		kind, err = budgetKind(t, `len(cluster.consistent.configmaps.list("t", {})) > 0`, c)
		if kind != core.BudgetBytes {
			t.Errorf("pages %v: list of 12 MiB: error %v, want the byte budget", pages, err)
		}
		if want := map[bool]int{false: 12, true: 8}[pages]; c.reads != want {
			t.Errorf("pages %v: %d objects read, want %d", pages, c.reads, want)
		}
	}
	// A list that charges as it reads counts its pages as reads.
	c = &apiCluster{size: 10, count: 20, pages: true}
	if kind, _ = budgetKind(t, `len(cluster.consistent.configmaps.list("t", {})) > 0`, c); kind != core.BudgetAPIReads || c.reads != MaxConsistentReads {
		t.Errorf("20 pages: %s after %d pages, want the read budget after %d", kind, c.reads, MaxConsistentReads)
	}
}
