package exprlang

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
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
			"data": map[string]any{
				"big": strings.Repeat("a", 1<<20), "other": strings.Repeat("a", 1<<20),
				"json":   "[" + strings.Repeat("[],", 200_000) + "[]]",
				"digits": strings.Repeat("0", 100_000) + "1", "cutset": strings.Repeat("é", 10_000),
				"lt": strings.Repeat("<", 3<<19),
			},
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
		"nested iteration over the object":        {`all(object.items, {all(object.items, {all(object.items, {.i >= 0})})})`, core.BudgetOperations},
		"nested iteration over ranges":            {`any(1..10000, {any(1..10000, {# < 0})})`, ""},
		"iteration scanning a large string":       {`none(1..100000, {object.data.big contains "zzz"})`, core.BudgetOperations},
		"iteration comparing large values":        {`all(1..100000, {object.data.big == object.data.other})`, core.BudgetOperations},
		"iteration with membership tests":         {`none(1..100000, {metadata in object.items})`, core.BudgetOperations},
		"regexp over a large string in a loop":    {`none(1..100000, {object.data.big matches "b$"})`, core.BudgetOperations},
		"exponential string growth":               {`reduce(1..64, #acc + #acc, "ab") != ""`, ""},
		"string growth in let chain":              {`let a = object.data.big + object.data.big; let b = a + a; let c = b + b; let d = c + c; d != ""`, core.BudgetBytes},
		"exponential array growth":                {`len(reduce(1..64, concat(#acc, #acc), [1])) > 0`, ""},
		"shared branches flattened":               {`len(flatten(reduce(1..64, [#acc, #acc], [1]))) > 0`, core.BudgetOperations},
		"shared branches encoded":                 {`toJSON(reduce(1..64, [#acc, #acc], [1])) != ""`, ""},
		"shared branches printed":                 {`string(reduce(1..64, [#acc, #acc], [1])) != ""`, core.BudgetOperations},
		"shared branches compared":                {`reduce(1..64, [#acc, #acc], [1]) == reduce(1..64, [#acc, #acc], [2])`, core.BudgetOperations},
		"join with a large separator":             {`join(map(1..5000, "x"), object.data.big) != ""`, ""},
		"replace inserting everywhere":            {`replace(object.data.big, "", object.data.big) != ""`, ""},
		"map building arrays":                     {`len(map(1..100000, {map(1..100000, #)})) > 0`, ""},
		"glob over a large name in a loop":        {`none(1..100000, {glob("*a*a*a*b", object.data.big)})`, core.BudgetOperations},
		"deep nesting compared":                   {`reduce(1..5000, [#acc], []) == reduce(1..5000, [#acc], [1])`, core.BudgetDepth},
		"deep nesting returned":                   {`reduce(1..5000, [#acc], [])`, core.BudgetDepth},
		"nested loops over array literals":        {`any([` + strings.Repeat("1,", 1500) + `1], {any([` + strings.Repeat("1,", 1500) + `1], {any([` + strings.Repeat("1,", 1500) + `1], {# < 0})})})`, core.BudgetOperations},
		"JSON decoded from a large string":        {`len(fromJSON("[" + replace(object.data.big, "a", "[],") + "[]]")) > 0`, ""},
		"regexp compiled from a large string":     {`"x" matches object.data.big`, core.BudgetPattern},
		"regexp built past the program bound":     {`let p = ".{1000}"; let q = p + p + p + p + p; object.data.other[0:30000] matches (q + q + q + q + q + q)`, core.BudgetPattern},
		"regexp charged by its program":           {`object.data.big matches "(a|b|c|d|e|f|g|h)*[a-z]{0,200}x$"`, core.BudgetOperations},
		"string length in a loop":                 {`all(1..40000, {len(object.data.big ?? "") >= 0})`, core.BudgetOperations},
		"numbers parsed in a loop":                {`none(1..40000, {(int(object.data.digits) + float(object.data.digits)) < 0})`, core.BudgetOperations},
		"trim with a long cutset":                 {`trim(object.data.big, object.data.cutset) != "x"`, core.BudgetOperations},
		"sortBy comparing large keys":             {`len(sortBy(1..5000, {object.data.big})) > 0`, core.BudgetOperations},
		"groupBy hashing large keys":              {`len(groupBy(1..5000, {object.data.big})) > 0`, core.BudgetOperations},
		"indented JSON of a repeated deep value":  {`let d = fromJSON(join(map(1..990, "["), "") + join(map(1..990, "]"), "")); len(toJSON(map(1..450, d))) > 0`, ""},
		"JSON escapes of a large string":          {`len(toJSON(object.data.lt)) > 0`, core.BudgetBytes},
		"concat of many large ranges":             {`let a = 1..300000; len(concat(a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a)) > 0`, core.BudgetBytes},
		"a computed key hashed in a loop":         {`all(1..150000, {object.data[object.data.big] == nil})`, core.BudgetOperations},
		"membership of a large key in a loop":     {`all(1..150000, {not (object.data.big in object.data)})`, core.BudgetOperations},
		"get with a large key in a loop":          {`all(1..150000, {get(object.data, object.data.big) == nil})`, core.BudgetOperations},
		"a match of Unicode classes":              {`object.data.big[0:8000] matches "(?:[\\pL\\pN]*\\pL){300}b"`, core.BudgetOperations},
		"loops started in a loop":                 {`none(1..100000, {one([], false)})`, core.BudgetBytes},
		"a method reading a large layout":         {`none(1..40000, {date("2024-01-02").Format(object.data.big) == ""})`, core.BudgetOperations},
		"split scanning a large string in a loop": {`none(1..100000, {len(split(object.data.big, "zzz")) > 1})`, core.BudgetOperations},
		"sort in a loop":                          {`all(1..100000, {len(sort(object.items | map(.i))) > 0})`, ""},
	}
	e := testEngine()
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

// FuzzBudget runs arbitrary expressions under a small budget and under the
// default one. Neither may panic or hang; a budget error is the only error
// the small budget may add, and what finishes within it must give the same
// result under the larger one (metering never changes a verdict).
func FuzzBudget(f *testing.F) {
	for _, s := range []string{
		`all(object.items, {.name startsWith "x"})`,
		`reduce(1..20, #acc + #acc, "ab") != ""`,
		`toJSON(reduce(1..20, [#acc, #acc], [1]))`,
		`join(map(object.items, .name), metadata.name)`,
		`replace(metadata.name, "", "xy")`,
		`object.items == object.items`,
		`metadata in object.items`,
		`flatten([[1], [[2]], object.items])`,
		`glob("*a*", metadata.name)`,
		`string(object)`,
		`sort(map(object.items, .i))`,
		`reduce(1..50, [#acc], [])`,
	} {
		f.Add(s)
	}
	small := testEngine(WithLimits(Limits{Operations: 2000, Bytes: 4096}))
	large := testEngine()
	env := func() core.Env {
		items := make([]any, 20)
		for i := range items {
			items[i] = map[string]any{"name": "item", "i": float64(i)}
		}
		return core.Env{"object": map[string]any{"items": items}, "metadata": map[string]any{"name": "n"}}
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := small.Compile(s)
		if err != nil {
			return
		}
		pl, err := large.Compile(s)
		if err != nil {
			t.Fatalf("compiles under one budget only: %v", err)
		}
		got, errSmall := ps.Eval(context.Background(), env())
		want, errLarge := pl.Eval(context.Background(), env())
		switch {
		case errors.Is(errSmall, core.ErrBudgetExceeded):
		case (errSmall == nil) != (errLarge == nil):
			t.Fatalf("%s: small budget: %v, large budget: %v", s, errSmall, errLarge)
		case errSmall == nil && fmt.Sprint(got) != fmt.Sprint(want):
			t.Fatalf("%s: %v under the small budget, %v under the large one", s, got, want)
		}
	})
}

// TestLongInputsAreRefused: functions whose parsers cost more than the
// bytes they read refuse inputs no real value is near, quickly and without
// quoting them whole (a megabyte quantity took 2.2 s and 2.3 GiB; a
// megabyte selector 233 ms and 139 MiB, quoted in full in the error).
func TestLongInputsAreRefused(t *testing.T) {
	e := testEngine()
	for _, src := range []string{`quantity(object.data.big) > 0`, `selects(object.data.big, {})`} {
		p, err := e.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Eval(context.Background(), bigEnv())
		if err == nil || len(err.Error()) > 1024 {
			t.Errorf("%s: %.200v; want a short error", src, err)
		}
	}
}

// TestComputedPatternChargedEveryTime: a pattern built while the rule runs
// is charged its compilation on every evaluation, also when the engine's
// cache already holds it (here because another rule writes it as a
// literal): a rule's verdict near its budget must not depend on which other
// rules are loaded or on when the garbage collector emptied the cache.
func TestComputedPatternChargedEveryTime(t *testing.T) {
	e := testEngine()
	env := core.Env{"object": map[string]any{"data": map[string]any{"small": "hello", "pattern": "l+o$"}}}
	computed, err := e.Compile(`object.data.small matches object.data.pattern`)
	if err != nil {
		t.Fatal(err)
	}
	charge := func() core.Account {
		var acct core.Account
		if _, err := computed.EvalShared(context.Background(), maps.Clone(env), &acct); err != nil {
			t.Fatal(err)
		}
		return acct
	}
	alone := charge()
	literal, err := e.Compile(`object.data.small matches "l+o$"`)
	if err != nil {
		t.Fatal(err)
	}
	if cached := charge(); cached != alone {
		t.Errorf("the same evaluation charged %+v alone and %+v with the pattern cached by another rule", alone, cached)
	}
	runtime.KeepAlive(literal)
}
