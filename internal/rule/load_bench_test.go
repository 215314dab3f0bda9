package rule_test

import (
	"testing"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// BenchmarkLoadPodSecurity is what `portal eval` does before its first
// manifest: parse and compile the two pod-security bundles. Every run of the
// CLI pays it once, serially, which is what caps a many-job run's speed-up.
func BenchmarkLoadPodSecurity(b *testing.B) {
	paths := []string{"../../examples/rules/pod-security/baseline", "../../examples/rules/pod-security/restricted"}
	b.ReportAllocs()
	for b.Loop() {
		eng := engine.New(exprlang.New())
		rules, errs := rule.LoadPaths(eng, paths)
		if len(errs) > 0 || len(rules) == 0 {
			b.Fatalf("%d rules, %v", len(rules), errs)
		}
	}
}
