package exprlang

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/core"
)

func TestEval(t *testing.T) {
	env := map[string]any{
		"object": map[string]any{
			"spec": map[string]any{"replicas": 3.0, "limits": map[string]any{"memory": "512Mi", "cpu": 1.0}},
		},
		"container": map[string]any{"image": map[string]any{"registry": "ghcr.io"}},
	}
	tests := []struct {
		expr string
		want any
	}{
		{`object.spec?.foo ?? false`, false},
		{`object.spec?.foo?.bar?.baz`, nil},
		{`object.spec.replicas >= 2`, true},
		{`container.image.registry in ["ghcr.io", "quay.io"]`, true},
		{`container.image.registry startsWith "ghcr"`, true},
		{`container.image.registry matches "^gh"`, true},
		{`quantity(object.spec.limits.memory) <= quantity("1Gi")`, true},
		{`quantity(object.spec.limits.cpu) == 1`, true},
		{`parseImage("nginx").name`, "library/nginx"},
		{`glob("ghcr.*", container.image.registry)`, true},
	}
	e := testEngine()
	for _, tt := range tests {
		p, err := e.Compile(tt.expr)
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		got, err := p.Eval(context.Background(), env)
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		if got != tt.want {
			t.Errorf("%s = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

func TestCompileErrorsNameTheProblem(t *testing.T) {
	tests := map[string]string{
		`contaner.name == "x"`:       "unknown name contaner",
		`now() > date("2020-01-01")`: "now is not available in rules: a verdict must not depend on when it was computed",
		`hasLabel(object, "x")`:      "unknown function hasLabel: rules call expr-lang's builtins and Portal's functions (docs/reference/expression-language.md)",
		`parseImag("nginx") != nil`:  "unknown function parseImag (did you mean parseImage?)",
		`lenght(object.x) > 1`:       "unknown function lenght (did you mean len?)",
		`repeat("a", 1000000000)`:    "repeat",
		`object.a ==`:                "unexpected token",
		``:                           "empty",
	}
	e := testEngine()
	for expr, want := range tests {
		_, err := e.Compile(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%q) error = %v, want it to mention %q", expr, err, want)
		}
	}
}

func TestBoundedCost(t *testing.T) {
	p, err := testEngine().Compile(`any(1..1000000, {any(1..1000000, {# < 0})})`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Eval(context.Background(), map[string]any{}); !errors.Is(err, core.ErrBudgetExceeded) {
		t.Fatalf("want a budget error, got %v", err)
	}
	if _, err := testEngine().Compile(strings.Repeat("1 + ", MaxNodes) + "1"); err == nil {
		t.Fatal("expression beyond MaxNodes compiled")
	}
}

func TestIdentifiers(t *testing.T) {
	p, err := testEngine().Compile(`let x = object.spec; container.name == "a" && all(x.items, {.name != metadata.name})`)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Identifiers(); !slices.Equal(got, []string{"container", "metadata", "object"}) {
		t.Fatalf("Identifiers() = %v", got)
	}
}

// FuzzCompile feeds arbitrary expressions to the compiler and the VM: neither
// may panic or hang, whatever the input. Go's fuzzing has no per-input
// timeout, so a hang is caught here: the evaluation runs under the
// engine's budget and a one-second deadline, and an input that has not
// returned ten seconds later fails.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`container.securityContext.privileged == true`,
		`object.spec?.foo ?? false`,
		`all(object.spec.containers, {.name startsWith "a"})`,
		`quantity("1Gi") > 0`,
		`"a" matches "("`,
		`1..3 | map(# * 2)`,
		`let x = 1; x + 1`,
	} {
		f.Add(s)
	}
	e := testEngine()
	env := map[string]any{
		"object":    map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "a"}}}},
		"container": map[string]any{"name": "a"},
	}
	f.Fuzz(func(t *testing.T, s string) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			p, err := e.Compile(s)
			if err != nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, _ = p.Eval(ctx, env)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("compiling and evaluating %q has not returned 10 s after its 1 s deadline", s)
		}
	})
}

// ruleNames are the names the rule engine declares with its default
// context builder (internal/engine's Names without a binder).
var ruleNames = []string{"object", "metadata", "request", "container", "spec", "securityContext", "pod"}

// testEngine is New with the names the rule engine declares.
func testEngine(opts ...Option) *Engine {
	return New(append([]Option{WithNames(ruleNames...)}, opts...)...)
}

// TestOperatorCalledAsAFunction: contains(a, b) says to write a contains b,
// where expr-lang only said it did not expect the operator.
func TestOperatorCalledAsAFunction(t *testing.T) {
	e := testEngine()
	for _, op := range []string{"contains", "matches", "startsWith", "endsWith"} {
		_, err := e.Compile(op + `(metadata.name, "a")`)
		if err == nil || !strings.HasPrefix(err.Error(), op+" is an operator, not a function: write `a "+op+" b`") {
			t.Errorf("%s(a, b): %v", op, err)
		}
	}
	if _, err := e.Compile(`metadata.name contains`); err == nil || strings.Contains(err.Error(), "not a function") {
		t.Errorf("a dangling operator: %v, want no function hint", err)
	}
}
