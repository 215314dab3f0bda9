package actions_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// TestExamples: every rule of examples/rules/response-actions (the
// cookbook's) loads, compiles, and names a registered action.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/rules/response-actions/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	eng := engine.New(exprlang.New())
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rules, errs := rule.ParseFile(f, data)
		if len(errs) > 0 || len(rules) != 1 {
			t.Fatalf("%s: %v", f, errs)
		}
		if _, err := eng.Compile(rules[0]); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, a := range rules[0].Actions {
			if _, ok := registryHas(a.Type); !ok {
				t.Fatalf("%s: action %q is not registered", f, a.Type)
			}
		}
	}
}

func registryHas(t string) (string, bool) {
	for _, x := range actions.Types() {
		if x == t {
			return x, true
		}
	}
	return "", false
}
