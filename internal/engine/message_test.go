package engine_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

var configMapGVK = []core.GVK{{Version: "v1", Kind: "ConfigMap"}}

// configMap is a tenant's own ConfigMap holding size bytes of data.
func configMap(size int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": "t"},
		"data":     map[string]any{"k": strings.Repeat("x", size)},
	}}
}

// evaluateMessage evaluates one failing ConfigMap rule with message msg
// under limits and returns its result.
func evaluateMessage(t *testing.T, l exprlang.Limits, expr, msg string, cm *unstructured.Unstructured) core.Result {
	t.Helper()
	e := engine.New(exprlang.New(exprlang.WithLimits(l)))
	r := newRule("m", expr)
	r.Match.GVKs = configMapGVK
	r.Message = msg
	c, err := e.Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	e.SetRules([]*engine.Rule{c})
	res, err := e.Evaluate(context.Background(), cm, engine.Options{Mode: core.ModeAdmission})
	if err != nil || len(res) != 1 {
		t.Fatalf("evaluate: %v %v", res, err)
	}
	return res[0]
}

// TestMessageHolesShareTheRuleBudget gives the expression and each of three
// holes about 42% of the operation budget (and, in the second case, each
// hole about 70% of the byte budget beside a cheap expression): with one budget
// per verdict the expression and the first hole fit and the other holes end
// in a budget error; with a budget per hole, every hole would render.
func TestMessageHolesShareTheRuleBudget(t *testing.T) {
	const busy = `count(1..1000, # > 0)`
	for _, tc := range []struct {
		name, expr, hole, rendered string
		limits                     exprlang.Limits
	}{
		{"operations", busy + ` == 1000`, busy, "1000", exprlang.Limits{Operations: 12_000}},
		{"bytes", `true`, `len(toJSON(object)) > 0`, "true", exprlang.Limits{Bytes: 50_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := strings.Repeat("{{ "+tc.hole+" }};", 3)
			res := evaluateMessage(t, tc.limits, tc.expr, msg, configMap(35_000))
			if res.Outcome != core.OutcomeFail {
				t.Fatalf("outcome %s (%s), want fail", res.Outcome, res.Message)
			}
			holes := strings.Split(strings.TrimSuffix(res.Message, ";"), ";")
			if len(holes) != 3 || holes[0] != tc.rendered {
				t.Fatalf("message %q: want the first hole rendered as %s", res.Message, tc.rendered)
			}
			for _, h := range holes[1:] {
				if !strings.HasPrefix(h, "<error: "+core.ErrBudgetExceeded.Error()) {
					t.Errorf("hole rendered %q, want a budget error: the holes share the expression's budget", h)
				}
			}
		})
	}
}

// generous lifts the budget, so only the message's own bounds hold.
var generous = exprlang.Limits{Operations: 1 << 50, Bytes: 1 << 50}

// TestMessageIsBounded renders holes over a tenant's own 1 MiB ConfigMap
// with the budget lifted: each hole keeps MaxHoleBytes and the message
// MaxMessageBytes, both marked as cut, and the text after a large hole
// survives.
func TestMessageIsBounded(t *testing.T) {
	cm := configMap(1 << 20)
	res := evaluateMessage(t, generous, `true`, "before {{ object }} after", cm)
	if n := len(res.Message); n > len("before ")+engine.MaxHoleBytes+len(" after") {
		t.Errorf("message of one hole is %d bytes, want at most the hole's %d and the text", n, engine.MaxHoleBytes)
	}
	if !strings.HasPrefix(res.Message, "before map[apiVersion:v1 data:map[k:xxx") || !strings.HasSuffix(res.Message, "[truncated] after") {
		t.Errorf("message %.80q...%q: want the hole cut and marked, the text kept", res.Message, res.Message[max(len(res.Message)-40, 0):])
	}
	res = evaluateMessage(t, generous, `true`, strings.Repeat("{{ object }}", engine.MaxMessageHoles), cm)
	if n := len(res.Message); n > engine.MaxMessageBytes || !strings.HasSuffix(res.Message, "[truncated]") {
		t.Errorf("message of %d holes is %d bytes, want at most %d, marked as cut", engine.MaxMessageHoles, n, engine.MaxMessageBytes)
	}
	for expr, why := range map[string]string{
		`object.data`:             "a rule that is not a boolean quotes its value",
		`int(object.data.k) == 1`: "an error quotes the string it failed on",
	} {
		res = evaluateMessage(t, generous, expr, "m", cm)
		if n := len(res.Message); res.Outcome != core.OutcomeError || n > engine.MaxMessageBytes {
			t.Errorf("%s: %s message of %d bytes, want an error of at most %d", why, res.Outcome, n, engine.MaxMessageBytes)
		}
	}
}

// TestMessageHoleIsNotBuiltWhole checks that a hole over a 16 MiB value
// prints only what the message keeps: rendering allocates far less than
// the value, where printing it first and cutting it after would allocate
// it whole.
func TestMessageHoleIsNotBuiltWhole(t *testing.T) {
	const size = 16 << 20
	cm := configMap(size)
	e := engine.New(exprlang.New(exprlang.WithLimits(generous)))
	r := newRule("m", `true`)
	r.Match.GVKs, r.Message = configMapGVK, "{{ object }} {{ object.data }} {{ object.data.k }}"
	c, err := e.Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	e.SetRules([]*engine.Rule{c})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := e.Evaluate(context.Background(), cm, engine.Options{})
	runtime.ReadMemStats(&after)
	if err != nil || len(res) != 1 || res[0].Outcome != core.OutcomeFail {
		t.Fatalf("evaluate: %v %v", res, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/4 {
		t.Errorf("rendering allocated %d bytes for a %d-byte value, want far less", alloc, size)
	}
}

// TestMessageHoleLimit checks that a message may have MaxMessageHoles holes
// and that one more is a compile error naming the limit and the hole.
func TestMessageHoleLimit(t *testing.T) {
	e := engine.New(exprlang.New())
	r := newRule("m", `true`)
	r.Message = strings.Repeat("{{ 1 }}", engine.MaxMessageHoles)
	if _, err := e.Compile(r); err != nil {
		t.Fatalf("%d holes: %v", engine.MaxMessageHoles, err)
	}
	r.Message += " {{ 1 }}"
	_, err := e.Compile(r)
	ce, ok := errors.AsType[*core.CompileError](err)
	if !ok || ce.Field != "message" || ce.Offset != 7*engine.MaxMessageHoles+1 || !strings.Contains(err.Error(), fmt.Sprintf("at most %d {{ }} holes", engine.MaxMessageHoles)) {
		t.Errorf("%d holes: error %v, want a compile error at the last hole naming the limit", engine.MaxMessageHoles+1, err)
	}
}

// TestMessageHoleBudgetErrorIsReported: a hole that runs out of the rule's
// budget counts like the expression running out (metric, log, the rule's
// BudgetExceeded condition, all behind the reporter), while the verdict
// stands and the message shows the error in the hole.
func TestMessageHoleBudgetErrorIsReported(t *testing.T) {
	e := engine.New(exprlang.New(exprlang.WithLimits(exprlang.Limits{Operations: 5_000})))
	rep := &budgetLog{}
	e.ReportBudget(rep)
	r := newRule("hole", `true`)
	r.Match.GVKs = configMapGVK
	r.Message = `count {{ count(1..100000, # > 0) }}`
	c, err := e.Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	e.SetRules([]*engine.Rule{c})
	res, err := e.Evaluate(context.Background(), configMap(10), engine.Options{Mode: core.ModeAdmission})
	if err != nil || len(res) != 1 {
		t.Fatalf("evaluate: %v %v", res, err)
	}
	if res[0].Outcome != core.OutcomeFail || !strings.Contains(res[0].Message, "<error: "+core.ErrBudgetExceeded.Error()) {
		t.Fatalf("result %s %q: want the violation, its hole showing the budget error", res[0].Outcome, res[0].Message)
	}
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if got := len(rep.errs); got != 1 {
		t.Errorf("the budget reporter heard %d budget errors, want the hole's one", got)
	}
}
