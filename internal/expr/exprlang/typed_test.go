package exprlang

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/expr-lang/expr"

	"github.com/vilaca/portal/internal/core"
)

// helperExpressions reach every helper typedCalls turns into a typed call,
// and the ones it leaves registered.
var helperExpressions = []string{
	`all(object.items, {#.name startsWith "x"}) && any(object.nums, {# > 5})`,
	`len(sortBy(object.items, {#.i})) > 0 and len(groupBy(object.items, {#.i % 3})) == 3`,
	`len(sort(object.nums)) == len(uniq(object.nums)) || object.data.small in keys(object.data)`,
	`object.data.small matches "^h" and object.data.small matches object.data.pattern`,
	`len(toJSON(object.items)) > 0 and len(string(object.data)) > 0 and len(fromJSON(object.data.json)) == 2`,
	`len(concat(object.nums, object.nums)) > len(object.nums) and object.nums == object.nums`,
	`join(split(object.data.small, "l"), "-") + replace(object.data.small, "l", "L") + trim(object.data.small, "ho") != ""`,
	`date("2026-01-01", "2006-01-02", "Europe/Lisbon").Year() == 2026 && object.data.small contains "ll"`,
	`glob(object.data.small, "h*") and map(object.items, {#.name + "!"})[0] endsWith "!"`,
	`len(filter(1..object.data.n, {# % 2 == 0})) == 5 && metadata.name == "n" && metadata.missing.name == nil`,
}

// typedEnv is a small object the helper expressions read.
func typedEnv() core.Env {
	items := make([]any, 30)
	nums := make([]any, 30)
	for i := range items {
		items[i] = map[string]any{"name": fmt.Sprintf("x%d", i), "i": i}
		nums[i] = i % 7
	}
	return core.Env{
		"object": map[string]any{
			"items": items, "nums": nums,
			"data": map[string]any{"small": "hello", "pattern": "l+o$", "json": "[[],[]]", "n": 10},
		},
		"metadata": map[string]any{"name": "n"},
	}
}

// TestMeteringHelpersAreTypedCalls: the helpers typedCalls knows are called
// as typed functions, not through the argument slice of registered ones,
// which cost a quarter of a pod's evaluation.
func TestMeteringHelpersAreTypedCalls(t *testing.T) {
	e := testEngine()
	typed := []string{fetchName, matchLitName}
	for name := range unaryHelpers {
		typed = append(typed, name)
	}
	for name := range countedHelpers {
		typed = append(typed, name)
	}
	seen := map[string]bool{}
	for _, src := range helperExpressions {
		p, err := e.Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		ref, err := expr.Compile(src, append(slices.Clip(e.options), expr.Patch(&budgetPatch{regexps: e.regexps}))...)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		for _, name := range typed {
			seen[name] = seen[name] || strings.Contains(ref.Disassemble(), name+"\n")
		}
		for line := range strings.Lines(p.(*program).prog.Disassemble()) {
			if !strings.Contains(line, "OpCall") {
				continue
			}
			for _, name := range typed {
				if strings.Contains(line, name+"\n") || strings.HasSuffix(line, name) {
					t.Errorf("%s: %s is called through expr-lang's argument slice: %s", src, name, strings.TrimSpace(line))
				}
			}
		}
		if !strings.Contains(p.(*program).prog.Disassemble(), "OpCallTyped") {
			t.Errorf("%s: no typed call in the program", src)
		}
	}
	for _, name := range typed {
		if !seen[name] {
			t.Errorf("no helper expression calls %s: add one", name)
		}
	}
}

// TestCompileAsExprLang holds compile to expr.Compile: the same expressions,
// compiled both ways with the same options, give the same result, the same
// error and the same charges on the meter, over the helper expressions and
// random ones (the generator of the budget property) against the hostile
// object and a small one.
func TestCompileAsExprLang(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	e, ref := testEngine(), testEngine()
	g := &gen{r: rand.New(rand.NewPCG(seed, 3))}
	exprs := slices.Clone(helperExpressions)
	for range 150 {
		exprs = append(exprs, g.of(kBool, 1+g.r.IntN(3), false))
	}
	envs := []core.Env{typedEnv(), hostileEnv()}
	compared := 0
	for _, src := range exprs {
		if orderDependent(src) {
			continue
		}
		got, err := e.Compile(src)
		if err != nil {
			continue
		}
		refProg, err := expr.Compile(src, append(slices.Clip(ref.options), expr.Patch(&budgetPatch{regexps: ref.regexps}))...)
		if err != nil {
			t.Errorf("%s: compiles with compile, not with expr.Compile: %v", src, err)
			continue
		}
		// The reference is the program as it was before typed calls: its
		// start-up cost counted on expr.Compile's tree.
		want := *got.(*program)
		want.engine, want.prog = ref, refProg
		want.base, want.baseBytes = staticCost(refProg.Node()), staticBytes(refProg.Node())
		want.ids, want.metered = identifiers(refProg.Node(), ref.names), readsMeter(refProg.Node())
		for _, env := range envs {
			gotOut, gotErr, gotAcct := evalOnce(got.(*program), env)
			wantOut, wantErr, wantAcct := evalOnce(&want, env)
			if gotErr != wantErr || !reflect.DeepEqual(gotOut, wantOut) {
				t.Errorf("%s:\n typed calls give %v (%s)\n expr.Compile     %v (%s)", src, gotOut, gotErr, wantOut, wantErr)
			}
			if gotAcct != wantAcct {
				t.Errorf("%s: typed calls charge %+v, expr.Compile %+v", src, gotAcct, wantAcct)
			}
			compared++
		}
	}
	if compared < 100 {
		t.Fatalf("only %d evaluations compared: the generator no longer writes expressions that compile", compared)
	}
}

// orderDependent reports whether src reads a map in Go's iteration order,
// which differs from one evaluation to the next (and so may its result and
// its charges).
func orderDependent(src string) bool {
	for _, f := range []string{"keys(", "values(", "toPairs(", "groupBy("} {
		if strings.Contains(src, f) {
			return true
		}
	}
	return false
}

// evalOnce evaluates p on a copy of env with a budget the hostile object
// exhausts sometimes, not by time (a deadline would make the two runs
// differ).
func evalOnce(p *program, env core.Env) (out any, err string, acct core.Account) {
	res, e := p.EvalShared(context.Background(), maps.Clone(env), &acct)
	if e != nil {
		err = e.Error()
	}
	return res, err, acct
}
