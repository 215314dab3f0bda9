package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

type budgetLog struct {
	mu   sync.Mutex
	errs []error
}

func (b *budgetLog) BudgetExceeded(_ *core.Rule, _ core.ResourceRef, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, err)
}

// TestBudgetExceededIsAnErrorResult checks that a rule out of budget yields
// an error result, which denies under onError: deny, is reported once, and
// leaves the other rules' verdicts alone.
func TestBudgetExceededIsAnErrorResult(t *testing.T) {
	looping := newRule("looping", `any(1..10000, {any(1..10000, {# < 0})})`)
	growing := newRule("growing", `reduce(1..64, #acc + #acc, "ab") == ""`)
	perContainer := newRule("per-container", `container.name != "" && all(1..100000, {all(1..100000, {# > 0})})`)
	fine := newRule("fine", `container.securityContext?.privileged == true`)
	e := load(t, looping, growing, perContainer, fine)
	rep := &budgetLog{}
	e.ReportBudget(rep)
	res, err := e.Evaluate(context.Background(), obj(t, twoBadContainers), engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	byRule := map[string][]core.Result{}
	for _, r := range res {
		byRule[r.Rule.Name] = append(byRule[r.Rule.Name], r)
	}
	for _, name := range []string{"looping", "growing", "per-container"} {
		rs := byRule[name]
		if len(rs) == 0 {
			t.Fatalf("%s: no result", name)
		}
		for _, r := range rs {
			if r.Outcome != core.OutcomeError || !errors.Is(r.Err, core.ErrBudgetExceeded) || !r.Denies() {
				t.Errorf("%s: outcome %s, err %v, denies %v; want a denying budget error", name, r.Outcome, r.Err, r.Denies())
			}
		}
	}
	if got := len(byRule["fine"]); got != 2 || byRule["fine"][0].Outcome != core.OutcomeFail {
		t.Errorf("fine: %v, want two failing containers", byRule["fine"])
	}
	if len(rep.errs) != 3 {
		t.Errorf("reported %d budget errors, want 3 (one per rule and object): %v", len(rep.errs), rep.errs)
	}
}

// TestEvaluationStopsWhenContextEnds gives a rule a budget it cannot spend
// in a day and ends the context while it runs: the evaluation must return
// with a deadline budget error.
func TestEvaluationStopsWhenContextEnds(t *testing.T) {
	e := engine.New(exprlang.New(exprlang.WithLimits(exprlang.Limits{Operations: 1 << 60, Bytes: 1 << 40})))
	r, err := e.Compile(newRule("slow", `let a = 1..1000; all(a, {all(a, {all(a, {all(a, {# > 0})})})})`))
	if err != nil {
		t.Fatal(err)
	}
	e.SetRules([]*engine.Rule{r})
	rep := &budgetLog{}
	e.ReportBudget(rep)
	parent, cancel := context.WithCancel(context.Background())
	ctx := &startedCtx{Context: parent, started: make(chan struct{})}
	done := make(chan []core.Result)
	go func() {
		res, _ := e.Evaluate(ctx, obj(t, twoBadContainers), engine.Options{})
		done <- res
	}()
	// The evaluation has checked the context once: it is running.
	<-ctx.started
	cancel()
	res := <-done
	var be *core.BudgetError
	if len(res) != 1 || !errors.As(res[0].Err, &be) || be.Kind != core.BudgetDeadline {
		t.Fatalf("results %v, want one deadline budget error", res)
	}
	if len(rep.errs) != 1 {
		t.Errorf("reported %v, want the deadline", rep.errs)
	}
}

// startedCtx closes started the first time the evaluation asks whether it
// has ended, which it does before it starts running the rule.
type startedCtx struct {
	context.Context
	once    sync.Once
	started chan struct{}
}

func (c *startedCtx) Err() error {
	err := c.Context.Err()
	c.once.Do(func() { close(c.started) })
	return err
}
