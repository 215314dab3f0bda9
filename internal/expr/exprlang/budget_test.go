package exprlang

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/core"
)

// bigEnv is an object as large as the API server admits (about 1.5 MiB),
// the input a hostile rule can make every operation pay for.
func bigEnv() core.Env {
	items := make([]any, 2000)
	for i := range items {
		items[i] = map[string]any{"name": strings.Repeat("x", 100), "i": float64(i)}
	}
	return core.Env{
		"object": map[string]any{
			"data":  map[string]any{"big": strings.Repeat("a", 1<<20), "other": strings.Repeat("a", 1<<20)},
			"items": items,
		},
		"metadata": map[string]any{"name": "n"},
	}
}

// TestPathologicalRulesEndInBudgetError runs one rule of every class that
// used to run for hours or allocate gigabytes: each must end in a budget
// error, not a result.
func TestPathologicalRulesEndInBudgetError(t *testing.T) {
	tests := map[string]struct {
		expr string
		kind core.BudgetKind
	}{
		"nested iteration over the object":     {`all(object.items, {all(object.items, {all(object.items, {.i >= 0})})})`, core.BudgetOperations},
		"nested iteration over ranges":         {`any(1..10000, {any(1..10000, {# < 0})})`, ""},
		"iteration scanning a large string":    {`none(1..100000, {object.data.big contains "zzz"})`, core.BudgetOperations},
		"iteration comparing large values":     {`all(1..100000, {object.data.big == object.data.other})`, core.BudgetOperations},
		"iteration with membership tests":      {`none(1..100000, {metadata in object.items})`, core.BudgetOperations},
		"regexp over a large string in a loop": {`none(1..100000, {object.data.big matches "b$"})`, core.BudgetOperations},
		"exponential string growth":            {`reduce(1..64, #acc + #acc, "ab") != ""`, core.BudgetBytes},
		"string growth in let chain":           {`let a = object.data.big + object.data.big; let b = a + a; let c = b + b; let d = c + c; d != ""`, core.BudgetBytes},
		"exponential array growth":             {`len(reduce(1..64, concat(#acc, #acc), [1])) > 0`, core.BudgetBytes},
		"shared branches flattened":            {`len(flatten(reduce(1..64, [#acc, #acc], [1]))) > 0`, core.BudgetOperations},
		"shared branches encoded":              {`toJSON(reduce(1..64, [#acc, #acc], [1])) != ""`, core.BudgetOperations},
		"shared branches printed":              {`string(reduce(1..64, [#acc, #acc], [1])) != ""`, core.BudgetOperations},
		"shared branches compared":             {`reduce(1..64, [#acc, #acc], [1]) == reduce(1..64, [#acc, #acc], [2])`, core.BudgetOperations},
		"join with a large separator":          {`join(map(1..5000, "x"), object.data.big) != ""`, ""},
		"replace inserting everywhere":         {`replace(object.data.big, "", object.data.big) != ""`, ""},
		"map building arrays":                  {`len(map(1..100000, {map(1..100000, #)})) > 0`, ""},
		"glob over a large name in a loop":     {`none(1..100000, {glob("*a*a*a*b", object.data.big)})`, core.BudgetOperations},
		"deep nesting compared":                {`reduce(1..5000, [#acc], []) == reduce(1..5000, [#acc], [1])`, core.BudgetDepth},
		"deep nesting returned":                {`reduce(1..5000, [#acc], [])`, core.BudgetDepth},
		"sort in a loop":                       {`all(1..100000, {len(sort(object.items | map(.i))) > 0})`, ""},
	}
	e := New()
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			p, err := e.Compile(tt.expr)
			if err != nil {
				t.Fatalf("compile %s: %v", tt.expr, err)
			}
			_, err = p.Eval(context.Background(), bigEnv())
			var be *core.BudgetError
			if !errors.As(err, &be) {
				t.Fatalf("%s: want a budget error, got %v", tt.expr, err)
			}
			if tt.kind != "" && be.Kind != tt.kind {
				t.Errorf("%s: budget %s exceeded, want %s (%v)", tt.expr, be.Kind, tt.kind, err)
			}
		})
	}
}
