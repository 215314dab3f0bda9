package examples_test

import (
	"context"
	"slices"
	"testing"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval/ruletest"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/rule"
	prt "github.com/vilaca/portal/internal/runtime"
)

// runRuleTests is `portal test examples/`: every test file under examples,
// with clusterState served to the lookups and events replayed as the
// command does.
func runRuleTests(t *testing.T) []ruletest.FileResult {
	t.Helper()
	files, err := ruletest.Find([]string{"."})
	if err != nil {
		t.Fatal(err)
	}
	opts := ruletest.Options{
		Root: ".",
		Lookups: func(r clustercache.Reader) engine.Binder {
			c := lookup.FromReader{R: r}
			return lookup.New(lookup.Options{Cache: c, Resolver: c})
		},
		Replay: func(ctx context.Context, eng *engine.Engine, cluster clustercache.Reader, path string) ([]ruletest.Finding, error) {
			var out []ruletest.Finding
			_, err := prt.Replay(ctx, eng, cluster, path, prt.DefaultDedupWindow, func(_ int, _ *event.Event, r core.Result) {
				out = append(out, ruletest.Finding{Rule: r.Rule.Name, EnforcementAction: r.Rule.EnforcementAction, Message: r.Message,
					Resource: ruletest.ResourceID{Kind: r.Resource.Kind, Namespace: r.Resource.Namespace, Name: r.Resource.Name}})
			})
			return out, err
		},
	}
	out := make([]ruletest.FileResult, 0, len(files))
	for _, f := range files {
		out = append(out, ruletest.Run(context.Background(), f, opts))
	}
	return out
}

// TestRuleTestFiles runs the examples' test files (portal-test.yaml), as
// `portal test examples/` does: none is broken and every expectation
// matches.
func TestRuleTestFiles(t *testing.T) {
	results := runRuleTests(t)
	if len(results) == 0 {
		t.Fatal("no portal-test.yaml under examples/")
	}
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("broken: %v", r.Err)
		}
		for _, c := range r.Checks {
			if !c.OK {
				t.Errorf("%s:%d: %s on %s %s: want %s (message %q), got %s %q", r.Path, c.Line, c.Rule, c.Resource, c.Container, c.Result, c.Message, c.Got, c.Messages)
			}
		}
	}
}

// TestEveryRuleHasATest: each rule under rules/ is asserted by at least one
// test file, both its passing and its failing side. Runtime rules are fed
// recorded logs (events): API server audit events and Falco alerts.
func TestEveryRuleHasATest(t *testing.T) {
	seen := map[string]map[string]bool{} // rule -> results asserted
	for _, r := range runRuleTests(t) {
		for _, c := range r.Checks {
			if seen[c.Rule] == nil {
				seen[c.Rule] = map[string]bool{}
			}
			seen[c.Rule][c.Result] = true
		}
	}
	files := ruleFiles(t)
	rules, errs := rule.LoadPaths(engine.New(exprlang.New()), files)
	for _, err := range errs {
		t.Error(err)
	}
	tested := 0
	for _, r := range rules {
		tested++
		got := seen[r.Name]
		if !got["pass"] || !(got["fail"] || got["warn"]) {
			t.Errorf("%s (%s): the test files assert %v of it; want a pass and a fail or warn", r.Name, r.Source.Path, keys(got))
		}
	}
	if tested < 40 {
		t.Errorf("only %d rules checked: the walk is wrong", tested)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
