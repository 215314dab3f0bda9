package eval_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/manifest"
)

// TestPassesOmitted: with PassesOmitted every format lists the failures
// and errors the full report lists, in the same order, and no pass; the
// summary still counts the passes. Spilled or not, one worker or several.
func TestPassesOmitted(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 300))
	full, _ := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 1})
	var want []eval.Result
	for _, r := range full.Results {
		if r.Result != "pass" {
			want = append(want, r)
		}
	}
	if len(want) == 0 || full.Summary.Pass == 0 {
		t.Fatalf("the input gives %d failures and %d passes: the test needs both", len(want), full.Summary.Pass)
	}
	for _, format := range []string{"json", "yaml", "junit", "table"} {
		for _, jobs := range []int{1, 3} {
			for _, dir := range []string{"", t.TempDir()} {
				rep, errs := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: jobs, Format: format, SpillDir: dir, Passes: eval.PassesOmitted})
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				out := render(t, rep, format)
				rep.Close()
				where := fmt.Sprintf("%s, %d jobs, spill %q", format, jobs, dir)
				if rep.Summary != full.Summary {
					t.Fatalf("%s: summary %+v, want %+v", where, rep.Summary, full.Summary)
				}
				switch format {
				case "json", "yaml":
					var got struct{ Results []eval.Result }
					if err := unmarshal(format, out, &got); err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					if g, w := must(json.Marshal(got.Results)), must(json.Marshal(want)); string(g) != string(w) {
						t.Fatalf("%s: %d results, want the full report's %d failures and errors", where, len(got.Results), len(want))
					}
				case "junit":
					var got struct {
						Tests int `xml:"tests,attr"`
					}
					if err := xml.Unmarshal([]byte(out), &got); err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					if n := strings.Count(out, "<testcase "); n != len(want) || got.Tests != len(want) {
						t.Fatalf("%s: %d test cases, tests=%d, want %d", where, n, got.Tests, len(want))
					}
				case "table":
					if out != render(t, full, "table") {
						t.Fatalf("%s: the table differs from the default one", where)
					}
				}
			}
		}
	}
}

// TestPassesShownInTheTable: with PassesShown the table lists a PASS row
// for every pass, besides the failures it always lists.
func TestPassesShownInTheTable(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 30))
	rep, _ := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 2, Format: "table", Passes: eval.PassesShown})
	out := render(t, rep, "table")
	var pass, fail int
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "PASS "):
			pass++
		case strings.HasPrefix(l, "FAIL "):
			fail++
		}
	}
	if pass != rep.Summary.Pass || fail != rep.Summary.Fail || pass == 0 {
		t.Fatalf("%d PASS and %d FAIL rows, want %d and %d:\n%s", pass, fail, rep.Summary.Pass, rep.Summary.Fail, out)
	}
}

func unmarshal(format, s string, v any) error {
	if format == "yaml" {
		return yaml.Unmarshal([]byte(s), v)
	}
	return json.Unmarshal([]byte(s), v)
}
