package ruletest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval/ruletest"
	"github.com/vilaca/portal/internal/lookup"
)

// opts wires clusterState into the lookups as portal test does.
var opts = ruletest.Options{Root: "testdata", Lookups: func(r clustercache.Reader) engine.Binder {
	c := lookup.FromReader{R: r}
	return lookup.New(lookup.Options{Cache: c, Resolver: c})
}}

func run(t *testing.T, path string) ruletest.FileResult {
	t.Helper()
	return ruletest.Run(context.Background(), filepath.Join("testdata", path), opts)
}

// TestPassingFile: every kind of result (pass, fail, warn, skip by an
// exception before its expiry, a lookup into clusterState, a message, an
// inline resource) is asserted and matches.
func TestPassingFile(t *testing.T) {
	r := run(t, "pass/portal-test.yaml")
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Name != "everything matches" {
		t.Errorf("name %q", r.Name)
	}
	if len(r.Checks) != 7 || r.Mismatches() != 0 {
		t.Errorf("%d checks, %d mismatches, want 7 and 0: %+v", len(r.Checks), r.Mismatches(), r.Checks)
	}
	// debug's container shell passes no-privileged without a result of its
	// own; the rest of what the rules gave is not asserted, and ignored.
	if r.Unasserted == 0 {
		t.Error("want unasserted results counted (audit-only's passes)")
	}
}

// TestFailingFile: each mismatch is reported at its expectation's line with
// what the rules gave: an exception past the file's now no longer skips, a
// container with no result, a message not found, a rule out of the file's
// mode.
func TestFailingFile(t *testing.T) {
	r := run(t, "fail/portal-test.yaml")
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	var got []string
	for _, c := range r.Checks {
		if !c.OK {
			got = append(got, fmt.Sprintf("%d %s %s %s", c.Line, c.Rule, c.Result, c.Got))
		}
	}
	want := []string{
		"9 no-privileged skip fail",
		"17 no-privileged fail none",
		"21 team-label warn warn",
		"25 audit-only pass none",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mismatches\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(r.Checks) != 5 {
		t.Errorf("%d checks, want 5", len(r.Checks))
	}
}

// TestBrokenFiles: a test that cannot run says why, at the line of the
// problem where there is one, and asserts nothing.
func TestBrokenFiles(t *testing.T) {
	for file, want := range map[string]string{
		"unknown-field.yaml":    `unknown-field.yaml:7: unknown field "reslt" (did you mean "result"?)`,
		"bad-result.yaml":       `bad-result.yaml:5: result "deny": use one of pass, fail, warn, skip, error`,
		"bad-rule.yaml":         `inputs/bad-rule.yaml:7:29: rule "broken": compile expression`,
		"missing-resource.yaml": `resources: stat testdata/broken/no-such-file.yaml`,
		"unknown-rule.yaml":     `unknown-rule.yaml:8: rule "team-lable" is not among the rules the test loads (did you mean team-label?)`,
		"unknown-resource.yaml": `unknown-resource.yaml:5: resource Pod/demo/webb is not among the resources the test evaluates (did you mean Pod/demo/web?)`,
		"duplicate.yaml":        `Pod/demo/web is defined twice, at testdata/pass/pods.yaml:12 and at testdata/broken/inputs/duplicate-pods.yaml:1`,
		"inputs/bad-rule.yaml":  `unknown field "severity"`,
		"no-such-test.yaml":     "no such file",
		"inline-no-kind.yaml":   "inline-no-kind.yaml:4: object has no apiVersion or kind",
	} {
		t.Run(file, func(t *testing.T) {
			r := run(t, "broken/"+file)
			if r.Err == nil || !strings.Contains(r.Err.Error(), want) {
				t.Errorf("error %v, want one containing %q", r.Err, want)
			}
			if len(r.Checks) != 0 {
				t.Errorf("a broken test gave %d checks", len(r.Checks))
			}
		})
	}
}

// TestEventsNeedAReplay: a test with events, run without a way to replay
// them, is broken, not passing on no findings.
func TestEventsNeedAReplay(t *testing.T) {
	r := run(t, "events/portal-test.yaml")
	if r.Err == nil || !strings.Contains(r.Err.Error(), "events: this build cannot replay events") {
		t.Errorf("error %v, want one saying events cannot be replayed", r.Err)
	}
}

// TestFind walks directories for portal-test.yaml (testdata included) and
// takes a file named on its own whatever its name.
func TestFind(t *testing.T) {
	got, err := ruletest.Find([]string{"testdata", "testdata/broken/bad-result.yaml", "testdata/pass"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"testdata/events/portal-test.yaml", "testdata/fail/portal-test.yaml", "testdata/pass/portal-test.yaml", "testdata/broken/bad-result.yaml"}
	if !slices.Equal(got, want) {
		t.Errorf("found %v, want %v", got, want)
	}
	if _, err := ruletest.Find([]string{"testdata/nothing-here"}); err == nil {
		t.Error("a path that does not exist is no error")
	}
}

// TestParseBounds: a test file past its bounds is refused with the bound.
func TestParseBounds(t *testing.T) {
	head := "rules: [r.yaml]\nresources: [p.yaml]\nresults:\n"
	one := "- {rule: r, resource: Pod/ns/p, result: pass}\n"
	for name, tc := range map[string]struct{ data, want string }{
		"too many results":   {head + strings.Repeat(one, ruletest.MaxResults+1), "over the 10000 a test file may"},
		"too big":            {head + strings.Repeat("#", ruletest.MaxFileBytes), "over the 1048576 a test file may have"},
		"two documents":      {head + one + "---\n" + head + one, "t.yaml:5: a test file holds one YAML document"},
		"no results":         {head, "a test file asserts at least one result"},
		"bad resource":       {head + "- {rule: r, resource: Pod, result: pass}\n", "t.yaml:4: resource \"Pod\": write Kind/namespace/name"},
		"bad mode":           {"mode: runtime\n" + head + one, "t.yaml:1: mode \"runtime\""},
		"long kind":          {head + "- {rule: r, resource: K" + strings.Repeat("k", 63) + "/p, result: pass}\n", "is not a kind: at most 63"},
		"bad resource entry": {"rules: [r.yaml]\nresources: [[a]]\nresults:\n" + one, "line 2: a resource is a manifest path or an object written inline"},
		"not a mapping":      {"- a\n", "a test file is a mapping"},
		"wrong type":         {"rules: r.yaml\nresources: [p.yaml]\nresults:\n" + one, "cannot unmarshal"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ruletest.Parse("t.yaml", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := ruletest.Parse("t.yaml", []byte(head+"- {rule: r, resource: K"+strings.Repeat("k", 62)+"/p, result: pass}\n")); err != nil {
		t.Errorf("a kind of 63 letters refused: %v", err)
	}
}

// FuzzParse: no input makes the test-file parser panic, and what it accepts
// has what a run relies on.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"pass/portal-test.yaml", "fail/portal-test.yaml", "broken/unknown-field.yaml", "broken/bad-result.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", p))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("rules: [a]\nresources: [b]\nresults: [{rule: r, resource: A/b, result: pass}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tf, err := ruletest.Parse("f.yaml", data)
		if err != nil {
			return
		}
		if len(tf.Rules) == 0 || len(tf.Resources) == 0 || len(tf.Results) == 0 || len(tf.Results) > ruletest.MaxResults {
			t.Fatalf("accepted a file without rules, resources or results: %+v", tf)
		}
		for _, e := range tf.Results {
			if _, err := ruletest.ParseResource(e.Resource); err != nil || e.Rule == "" || e.Line <= 0 || !slices.Contains(ruletest.Results, e.Result) {
				t.Fatalf("accepted a bad expectation %+v: %v", e, err)
			}
		}
	})
}
