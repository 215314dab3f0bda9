package engine_test

import (
	"context"
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
		{"operations", busy + ` > 0`, busy, "1000", exprlang.Limits{Operations: 12_000}},
		{"bytes", `true`, `len(toJSON(object)) > 0`, "true", exprlang.Limits{Bytes: 100_000}},
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
