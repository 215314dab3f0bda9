package examples_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval/ruletest"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

const crossResourceDir = "rules/cross-resource"

// TestCrossResource: each cross-resource rule reads the cluster (a
// cluster.* lookup), and its test file (testdata/<rule>/portal-test.yaml,
// run by TestRuleTestFiles) evaluates it against a clusterState, so what it
// asserts comes from the lookups and not from a rule that errors without
// one.
func TestCrossResource(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(crossResourceDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rules under %s: %v", crossResourceDir, err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			rules, errs := rule.LoadPaths(engine.New(exprlang.New()), []string{file})
			if len(errs) > 0 || len(rules) != 1 {
				t.Fatalf("load %s: %v", file, errs)
			}
			if len(rules[0].Lookups()) == 0 {
				t.Errorf("%s makes no cluster.* lookup", file)
			}
			path := filepath.Join(crossResourceDir, "testdata", name, ruletest.FileName)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tf, err := ruletest.Parse(path, data)
			if err != nil {
				t.Fatal(err)
			}
			if len(tf.ClusterState) == 0 {
				t.Errorf("%s has no clusterState for the lookups to read", path)
			}
		})
	}
}
