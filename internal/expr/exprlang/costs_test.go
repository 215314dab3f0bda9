package exprlang

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/parser/operator"
)

// TestCostTableCoversExprLang holds the cost model to expr-lang's own lists
// of builtins and operators: an upgrade that adds one fails here until it has
// a row (and, until then, rules that use it do not compile).
func TestCostTableCoversExprLang(t *testing.T) {
	for _, name := range builtin.Names {
		if _, ok := builtinCosts[name]; !ok {
			t.Errorf("builtin %s has no row in builtinCosts", name)
		}
	}
	for name := range builtinCosts {
		if !slices.Contains(builtin.Names, name) {
			t.Errorf("builtinCosts has a row for %s, which expr-lang does not define", name)
		}
	}
	ops := slices.Concat(slices.Collect(maps.Keys(operator.Binary)), slices.Collect(maps.Keys(operator.Unary)))
	for _, op := range ops {
		if _, ok := operatorCosts[op]; !ok {
			t.Errorf("operator %s has no row in operatorCosts", op)
		}
	}
	for op := range operatorCosts {
		if !slices.Contains(ops, op) {
			t.Errorf("operatorCosts has a row for %s, which expr-lang does not define", op)
		}
	}
	for _, f := range portalFunctions {
		if _, ok := functionCosts[f.name]; !ok {
			t.Errorf("function %s has no row in functionCosts", f.name)
		}
	}
	for _, row := range CostModel() {
		if strings.TrimSpace(row.Charge) == "" {
			t.Errorf("%s %s: no charge", row.Section, row.Name)
		}
	}
}

// TestUnmeteredIsRefused: a builtin or function the cost model has no row
// for does not compile, whatever expr-lang offers.
func TestUnmeteredIsRefused(t *testing.T) {
	e := testEngine()
	saved := builtinCosts["upper"]
	delete(builtinCosts, "upper")
	defer func() { builtinCosts["upper"] = saved }()
	for _, src := range []string{`upper(metadata.name) == "X"`, `now() != nil`, `repeat("a", 3) == ""`, `timezone("UTC") != nil`} {
		if _, err := e.Compile(src); err == nil {
			t.Errorf("%s compiled; want it refused", src)
		}
	}
}
