package exprlang

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/core"
)

// gen writes random expressions over expr-lang's grammar, typed loosely so
// most of them compile: every enabled builtin, the operators, predicates with
// nested closures, let bindings and string building, over the names of
// hostileEnv.
type gen struct {
	r *rand.Rand
}

// kinds of value an expression is generated for.
const (
	kStr = iota
	kNum
	kArr
	kMap
	kBool
	kAny
	nKinds
)

func (g *gen) pick(alts ...func() string) string { return alts[g.r.IntN(len(alts))]() }

func (g *gen) lit(alts ...string) func() string {
	return func() string { return alts[g.r.IntN(len(alts))] }
}

// of returns an expression of kind k, at most depth levels deep; inLoop says
// `#` is an element.
func (g *gen) of(k, depth int, inLoop bool) string {
	if depth <= 0 {
		return g.leaf(k, inLoop)
	}
	d := depth - 1
	s := func() string { return g.of(kStr, d, inLoop) }
	n := func() string { return g.of(kNum, d, inLoop) }
	a := func() string { return g.of(kArr, d, inLoop) }
	m := func() string { return g.of(kMap, d, inLoop) }
	b := func() string { return g.of(kBool, d, inLoop) }
	x := func() string { return g.of(kAny, d, inLoop) }
	body := func(k int) func() string { return func() string { return g.of(k, d, true) } }
	f := fmt.Sprintf
	switch k {
	case kStr:
		return g.pick(
			func() string { return f("(%s + %s)", s(), s()) },
			func() string { return f("upper(%s)", s()) },
			func() string { return f("lower(%s)", s()) },
			func() string { return f("trim(%s)", s()) },
			func() string { return f("trim(%s, %s)", s(), s()) },
			func() string { return f("trimPrefix(%s, %s)", s(), s()) },
			func() string { return f("trimSuffix(%s, %s)", s(), s()) },
			func() string { return f("replace(%s, %s, %s)", s(), s(), s()) },
			func() string { return f("join(%s, %s)", a(), s()) },
			func() string { return f("string(%s)", x()) },
			func() string { return f("toJSON(%s)", x()) },
			func() string { return f("toBase64(%s)", s()) },
			func() string { return f("type(%s)", x()) },
			func() string { return f("(%s ?? %s)", s(), s()) },
			func() string { return f("(%s ? %s : %s)", b(), s(), s()) },
			func() string { return f("let v = %s; v + v", s()) },
			func() string { return f("%s[0:%s]", s(), n()) },
			func() string { return f(`date("2024-01-02").Format(%s)`, s()) },
			func() string { return f("reduce(%s, #acc + %s, %s)", a(), body(kStr)(), s()) },
		)
	case kNum:
		return g.pick(
			func() string { return f("len(%s)", g.pick(s, a, m)) },
			func() string { return f("int(%s)", g.pick(s, n)) },
			func() string { return f("float(%s)", g.pick(s, n)) },
			func() string { return f("(%s + %s)", n(), n()) },
			func() string { return f("(%s * %s)", n(), n()) },
			func() string { return f("(%s %% 7)", n()) },
			func() string { return f("(%s ** 2)", n()) },
			func() string { return f("abs(%s)", n()) },
			func() string { return f("count(%s, %s)", a(), body(kBool)()) },
			func() string { return f("sum(%s, %s)", a(), body(kNum)()) },
			func() string { return f("indexOf(%s, %s)", s(), s()) },
			func() string { return f("lastIndexOf(%s, %s)", s(), s()) },
			func() string { return f("findIndex(%s, %s)", a(), body(kBool)()) },
			func() string { return f("max(%s)", g.of(kArr, 0, false)) },
			func() string { return f("median(%s)", g.of(kArr, 0, false)) },
			func() string { return f("mean(%s)", g.of(kArr, 0, false)) },
		)
	case kArr:
		return g.pick(
			func() string { return f("split(%s, %s)", s(), s()) },
			func() string { return f("splitAfter(%s, %s)", s(), s()) },
			func() string { return f("map(%s, %s)", a(), body(kAny)()) },
			func() string { return f("filter(%s, %s)", a(), body(kBool)()) },
			func() string { return f("sortBy(%s, %s)", a(), body(kStr)()) },
			func() string { return f("sort(%s)", a()) },
			func() string { return f("concat(%s, %s)", a(), a()) },
			func() string { return f("flatten(%s)", a()) },
			func() string { return f("keys(%s)", m()) },
			func() string { return f("values(%s)", m()) },
			func() string { return f("toPairs(%s)", m()) },
			func() string { return f("reverse(%s)", a()) },
			func() string { return f("uniq(%s)", a()) },
			func() string { return f("take(%s, %s)", a(), n()) },
			func() string { return f("[%s, %s]", x(), x()) },
			func() string { return f("reduce(%s, concat(#acc, [#]), [])", a()) },
			func() string { return f("reduce(%s, [#acc, #acc], [1])", a()) },
			func() string { return f("1..%s", n()) },
		)
	case kMap:
		return g.pick(
			func() string { return f("groupBy(%s, %s)", a(), body(kStr)()) },
			func() string { return f("fromJSON(%s)", s()) },
			func() string { return f(`{"a": %s, "b": %s}`, x(), x()) },
			func() string { return f("fromPairs(toPairs(%s))", m()) },
			func() string { return f("parseImage(%s)", s()) },
		)
	case kBool:
		return g.pick(
			func() string { return f("(%s matches %s)", s(), s()) },
			func() string { return f("(%s contains %s)", s(), s()) },
			func() string { return f("(%s startsWith %s)", s(), s()) },
			func() string { return f("(%s endsWith %s)", s(), s()) },
			func() string { return f("(%s == %s)", x(), x()) },
			func() string { return f("(%s != %s)", x(), x()) },
			func() string { return f("(%s < %s)", n(), n()) },
			func() string { return f("(%s >= %s)", s(), s()) },
			func() string { return f("(%s in %s)", x(), a()) },
			func() string { return f("(%s in %s)", s(), m()) },
			func() string { return f("all(%s, %s)", a(), body(kBool)()) },
			func() string { return f("any(%s, %s)", a(), body(kBool)()) },
			func() string { return f("none(%s, %s)", a(), body(kBool)()) },
			func() string { return f("one(%s, %s)", a(), body(kBool)()) },
			func() string { return f("hasPrefix(%s, %s)", s(), s()) },
			func() string { return f("glob(%s, %s)", s(), s()) },
			func() string { return f("not %s", b()) },
			func() string { return f("(%s && %s)", b(), b()) },
			func() string { return f("(%s || %s)", b(), b()) },
			func() string { return f("(find(%s, %s) != nil)", a(), body(kBool)()) },
		)
	}
	return g.of(g.r.IntN(kAny), depth, inLoop)
}

func (g *gen) leaf(k int, inLoop bool) string {
	if inLoop && g.r.IntN(3) == 0 {
		switch k {
		case kStr:
			return "string(#)"
		case kAny:
			return "#"
		}
	}
	switch k {
	case kStr:
		return g.lit(`object.data.big`, `object.data.small`, `"a"`, `""`, `".{1000}"`, `"(a|b)*c"`, `object.data.digits`, `object.data.json`, `object.data.cutset`, `metadata.name`)()
	case kNum:
		return g.lit(`1`, `0`, `16`, `1000`, `40000`, `-3`, `2.5`)()
	case kArr:
		return g.lit(`object.items`, `object.nums`, `1..40000`, `[1, 2, 3]`, `[]`, `object.nested`)()
	case kMap:
		return g.lit(`object`, `object.data`, `metadata`, `object.deep`, `{}`)()
	case kBool:
		return g.lit(`true`, `false`, `object.flag`)()
	}
	return g.leaf(g.r.IntN(kAny), inLoop)
}

// hostileEnv is an object as large and as awkward as the API server admits:
// a megabyte string, thousands of elements, a deep map.
func hostileEnv() core.Env {
	items := make([]any, 2000)
	nums := make([]any, 2000)
	for i := range items {
		items[i] = map[string]any{"name": strings.Repeat("x", 100), "i": float64(i)}
		nums[i] = float64(i % 97)
	}
	deep := map[string]any{}
	for range 900 {
		deep = map[string]any{"d": deep}
	}
	nested := make([]any, 100)
	for i := range nested {
		nested[i] = items[:100]
	}
	return core.Env{
		"object": map[string]any{
			"data": map[string]any{
				"big": strings.Repeat("ab", 1<<19), "small": "hello",
				"json": "[" + strings.Repeat("[],", 100_000) + "[]]", "digits": strings.Repeat("0", 100_000) + "1",
				"cutset": strings.Repeat("é", 10_000),
			},
			"items": items, "nums": nums, "nested": nested, "deep": deep, "flag": true,
		},
		"metadata": map[string]any{"name": "n"},
	}
}

// Bounds the property holds every evaluation to.
const (
	propertyDeadline = 100 * time.Millisecond
	// propertyMargin is how far past its deadline an evaluation may end: one
	// iteration's constant work, or the one operation that was running,
	// plus a garbage collection.
	propertyMargin = 400 * time.Millisecond
	// propertyAllocFactor bounds what an evaluation allocates, in multiples
	// of the byte budget: one operation may build its output before it is
	// charged, never more than a few times the budget.
	propertyAllocFactor = 8
)

// checkBounded compiles src and, if it compiles, evaluates it against env
// with a deadline: it must end (in any result or error) within the deadline
// and the margin, and allocate within propertyAllocFactor times the byte
// budget.
func checkBounded(t *testing.T, e *Engine, src string, env core.Env) {
	t.Helper()
	p, err := e.Compile(src)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), propertyDeadline)
	defer cancel()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start, cpuStart := time.Now(), cpuTime()
	_, err = p.Eval(ctx, env)
	// The lesser of the wall and the CPU time: other processes on a busy
	// machine add to the first, the parallel garbage collector to the
	// second, and only work of the evaluation's own adds to both.
	took := min(time.Since(start), cpuTime()-cpuStart)
	runtime.ReadMemStats(&after)
	if took > propertyDeadline+propertyMargin {
		t.Errorf("%s: ran %v, past its deadline of %v (%v)", src, took, propertyDeadline, short(err))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(propertyAllocFactor*e.limits.Bytes) {
		t.Errorf("%s: allocated %d MiB, more than %d times the byte budget (%v)", src, alloc>>20, propertyAllocFactor, short(err))
	}
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func short(err error) string {
	if err == nil {
		return "no error"
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// TestRandomExpressionsStayWithinBounds is the property the evaluation
// budget promises, over random expressions against the hostile object: none
// outlives its deadline by more than the margin or allocates more than a
// small multiple of its byte budget. The seed is logged; FuzzEvaluationBounds
// explores further seeds in `make fuzz`.
func TestRandomExpressionsStayWithinBounds(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	e := testEngine()
	env := hostileEnv()
	g := &gen{r: rand.New(rand.NewPCG(seed, 1))}
	for range 150 {
		checkBounded(t, e, g.of(kBool, 1+g.r.IntN(4), false), env)
	}
}

// FuzzEvaluationBounds checks the same property for the expressions the
// generator writes from each fuzzed seed and depth.
func FuzzEvaluationBounds(f *testing.F) {
	for i := range 8 {
		f.Add(uint64(i), uint8(i))
	}
	e := testEngine()
	env := hostileEnv()
	f.Fuzz(func(t *testing.T, seed uint64, depth uint8) {
		g := &gen{r: rand.New(rand.NewPCG(seed, 2))}
		checkBounded(t, e, g.of(kBool, 1+int(depth%5), false), env)
	})
}
