package eval_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/manifest"
)

// TestEncodedFormatsMatchWhole: a report the workers encoded as YAML or
// JUnit while the run went (spilled to a file or kept in memory, with any
// number of workers, merged from pages as a live run does) is written in
// the bytes the whole report, kept as Results, is written in: strings that
// YAML must quote and XML must escape, and messages long enough to wrap,
// included.
func TestEncodedFormatsMatchWhole(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 300))
	for i, weird := range []string{"<a href=\"x\">&amp;</a>", "tab\there\nnew: \"quoted\" 'single' # not a comment", "yes", "- item", strings.Repeat("long words ", 30), "日本語 \u2028", "bad \xff\xfe utf-8", "null", "0x1F", ""} {
		docs = append(docs, manifest.Document{Path: "weird.yaml", Line: 1, Data: fmt.Appendf(nil,
			"apiVersion: v1\nkind: Pod\nmetadata:\n  name: %q\n  namespace: %q\nspec:\n  hostNetwork: true\n  containers:\n  - name: %q\n    image: %q\n    securityContext: {privileged: true}\n", weird, fmt.Sprint("ns", i), weird, weird)})
	}
	whole, errs := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 1})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, format := range []string{"yaml", "junit"} {
		want := render(t, whole, format)
		for _, jobs := range []int{1, 3} {
			for _, dir := range []string{"", t.TempDir()} {
				rep, errs := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: jobs, Format: format, SpillDir: dir})
				if len(errs) > 0 {
					t.Fatal(errs)
				}
				if len(rep.Results) != 0 {
					t.Fatalf("%s: the report kept %d results besides their encoding", format, len(rep.Results))
				}
				if got := render(t, rep, format); got != want {
					t.Fatalf("%s, %d jobs, spill %q: differs from the whole report\n got: %.3000s\nwant: %.3000s", format, jobs, dir, got, want)
				}
				rep.Close()
			}
		}
		merged := eval.NewReport(format)
		for lo := 0; lo < len(docs); lo += 100 {
			page, _ := eval.Evaluate(context.Background(), eng, docs[lo:min(lo+100, len(docs))], eval.Options{Jobs: 2, Format: format, SpillDir: t.TempDir()})
			merged.Merge(page)
			page.Close()
		}
		if got := render(t, merged, format); got != want {
			t.Fatalf("%s: merged pages differ from the whole report", format)
		}
		empty, _ := eval.Evaluate(context.Background(), eng, nil, eval.Options{Format: format})
		if got, want := render(t, empty, format), render(t, eval.NewReport(""), format); got != want {
			t.Fatalf("%s: empty report %q, want %q", format, got, want)
		}
	}
}
