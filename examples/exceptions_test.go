package examples_test

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/exception"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

const exceptionsDir = "exceptions"

// TestExampleExceptionsLoadAndExempt: every example exception loads, and
// the debug-tools one exempts exactly its pod from pss-baseline-privileged
// in the demo manifests until it expires: that pod's result is skip, naming
// it, and no other result is; after its expires, nothing is skipped. The
// clock is fixed, so the example's date never ages the test.
func TestExampleExceptionsLoadAndExempt(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	eng := engine.New(exprlang.New(), engine.WithClock(clk))
	rules, errs := rule.LoadPaths(eng, []string{podSecurityDir})
	xs, xerrs := exception.LoadPaths(eng, []string{exceptionsDir}, nil)
	for _, err := range append(errs, xerrs...) {
		t.Errorf("load: %v", err)
	}
	if len(xs) == 0 || t.Failed() {
		t.Fatal("the example exceptions did not load")
	}
	eng.SetRules(rules)
	eng.SetExceptions(xs)
	skips := func() map[string]string {
		out := map[string]string{}
		for _, r := range evaluate(t, eng, manifestsDir+"/pods.yaml") {
			if r.Outcome == core.OutcomeSkip {
				out[r.Rule.Name+" "+r.Resource.Name] = r.Exception.String()
			}
		}
		return out
	}
	got := skips()
	if len(got) != 1 || got["pss-baseline-privileged debug-tools"] != "PortalException demo/debug-tools-privileged" {
		t.Errorf("skipped %v, want only pss-baseline-privileged on debug-tools", got)
	}
	clk.SetTime(time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC))
	if got := skips(); len(got) != 0 {
		t.Errorf("skipped %v after the exception expired", got)
	}
}
