package rule_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// LoadPaths compiles files on several goroutines; what a user reads (the
// rules and the errors) must still come in the order of the paths and files,
// the same on every run, with each file's errors in place and a name defined
// twice refused where it is defined second.
func TestLoadPathsKeepsTheOrderOfThePaths(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	dir := t.TempDir()
	var wantRules []string
	for i := range 24 {
		name := fmt.Sprintf("r%02d", i)
		body := fmt.Sprintf("name: %s\nmatch:\n  gvk: [{group: \"\", kind: Pod}]\n"+
			"rule: container.image matches \"^nginx:[0-9.]+$\" && metadata.name != %q\n"+
			"message: '{{ container.name }} in {{ metadata.name }}'\n", name, name)
		switch i {
		case 7:
			body = brokenRule
		case 12:
			body = strings.Replace(body, "name: r12", "name: r03", 1)
		default:
			wantRules = append(wantRules, name)
		}
		write(t, filepath.Join(dir, name+".yaml"), body)
	}
	// The path that does not exist comes first: its error stays in its place.
	paths := []string{filepath.Join(dir, "missing"), dir, filepath.Join(dir, "r05.yaml")}
	wantErrs := []string{"missing", "r07.yaml:", "r12.yaml:1"}

	var first string
	for run := range 20 {
		rules, errs := rule.LoadPaths(engine.New(exprlang.New()), paths)
		var got []string
		for _, r := range rules {
			got = append(got, r.Rule.Name)
		}
		if !slices.Equal(got, wantRules) {
			t.Fatalf("run %d: rules %v, want %v", run, got, wantRules)
		}
		if len(errs) != len(wantErrs) {
			t.Fatalf("run %d: %d errors, want %d: %v", run, len(errs), len(wantErrs), errs)
		}
		var all strings.Builder
		for i, err := range errs {
			if !strings.Contains(err.Error(), wantErrs[i]) {
				t.Errorf("run %d: error %d is %q, want it about %s", run, i, err, wantErrs[i])
			}
			fmt.Fprintln(&all, err)
		}
		if !strings.Contains(errs[2].Error(), "already defined at "+filepath.Join(dir, "r03.yaml:1")) {
			t.Errorf("run %d: the second r03 says %q, want it to name the first", run, errs[2])
		}
		if run == 0 {
			first = all.String()
		} else if all.String() != first {
			t.Fatalf("run %d: errors\n%s\nwant those of the first run\n%s", run, all.String(), first)
		}
	}
}

// The pod-security and cross-resource bundles (patterns, message holes,
// cluster lookups) compiled on several goroutines give the rules one
// goroutine gives, so a rule's compile shares nothing it writes (under make
// test's race detector, this fails on a data race).
func TestLoadPathsConcurrentAsSerial(t *testing.T) {
	paths := []string{"../../examples/rules/pod-security/baseline", "../../examples/rules/pod-security/restricted", "../../examples/rules/cross-resource"}
	load := func(procs int) []string {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		rules, errs := rule.LoadPaths(engine.New(exprlang.New()), paths)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		var out []string
		for _, r := range rules {
			out = append(out, fmt.Sprintf("%s %s %v %v", r.Rule.Name, r.Rule.Source, r.ContainerScoped(), r.Lookups()))
		}
		return out
	}
	serial := load(1)
	if len(serial) < 20 {
		t.Fatalf("%d rules, want the pod-security bundle's 19 and the cross-resource rules", len(serial))
	}
	if parallel := load(8); !slices.Equal(parallel, serial) {
		t.Errorf("on 8 goroutines:\n%v\nwant as on one:\n%v", parallel, serial)
	}
}
