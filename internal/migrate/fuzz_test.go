package migrate

import (
	"testing"

	exprparser "github.com/expr-lang/expr/parser"
)

// FuzzParse checks that the SpEL parser and the translator never panic, and
// that every translation is an expression expr-lang parses. Evaluating the
// AST must not panic either.
func FuzzParse(f *testing.F) {
	for _, tt := range translations {
		f.Add(tt.spel)
	}
	for _, tt := range refusals {
		f.Add(tt.spel)
	}
	for _, c := range constructs {
		f.Add(c)
	}
	f.Add(`((a ?: b) ?: c) ?: d`)
	f.Add(`container.name?.toLowerCase()?.toUpperCase()?.length() > 1`)
	env := map[string]any{
		"container": map[string]any{"name": "app", "command": []any{"sh"}, "securityContext": map[string]any{"runAsUser": int64(0)}},
		"metadata":  map[string]any{"labels": map[string]any{"a": "b"}},
		"spec":      map[string]any{}, "securityContext": map[string]any{}, "object": map[string]any{}, "pod": nil, "request": nil,
	}
	eng := ruleCompiler()
	f.Fuzz(func(t *testing.T, src string) {
		n, err := Parse(src)
		if err != nil {
			if _, ok := err.(*ExprError); !ok {
				t.Fatalf("Parse(%q): error %v is not an *ExprError", src, err)
			}
			return
		}
		_, _ = Eval(n, env)
		out, err := Translate(n)
		if err != nil {
			return
		}
		if _, err := exprparser.Parse(out); err != nil {
			t.Fatalf("Parse(%q) translated to %q, which expr-lang cannot parse: %v", src, out, err)
		}
		// Compiling may fail (a literal type mismatch such as 1 == 'a' is a
		// compile error in expr-lang), but it must not panic.
		_, _ = eng.Compile(out)
	})
}
