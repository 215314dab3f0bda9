package eval_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/manifest"
)

// stream returns n generated pods (one in ten violating) as one YAML stream,
// with a broken document at each index in broken.
func stream(t testing.TB, n int, broken ...int) []byte {
	t.Helper()
	var buf bytes.Buffer
	for i := range n {
		buf.WriteString("---\n")
		if bytesContains(broken, i) {
			fmt.Fprintf(&buf, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: [broken-%d\n", i)
			continue
		}
		y, err := yaml.Marshal(pod(i, 1+i%3, i%10 == 0))
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(y)
	}
	return buf.Bytes()
}

func bytesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func render(t *testing.T, rep *eval.Report, format string) string {
	t.Helper()
	var out bytes.Buffer
	if err := rep.Write(&out, format); err != nil {
		t.Fatalf("write %s: %v", format, err)
	}
	return out.String()
}

// TestEvaluateJobsKeepOrder checks that parallel workers change nothing a
// user sees: every format and the errors are byte for byte those of one
// worker, in input order.
func TestEvaluateJobsKeepOrder(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 500, 7, 333))
	for _, format := range eval.Formats {
		one, errs1 := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 1, Format: format})
		many, errsN := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 4, Format: format})
		if len(errs1) != 2 || fmt.Sprint(errs1) != fmt.Sprint(errsN) {
			t.Fatalf("%s: errors differ or are not the two broken documents:\n%v\n%v", format, errs1, errsN)
		}
		if !strings.Contains(errs1[0].Error(), "pods.yaml:") || !strings.Contains(errs1[1].Error(), "pods.yaml:") {
			t.Fatalf("errors do not locate the documents: %v", errs1)
		}
		if one.Objects() != 498 || many.Objects() != 498 || !one.Denied() || !many.Denied() {
			t.Fatalf("%s: objects %d/%d, denied %v/%v", format, one.Objects(), many.Objects(), one.Denied(), many.Denied())
		}
		if a, b := render(t, one, format), render(t, many, format); a != b {
			t.Fatalf("%s: 4 workers wrote a different report than 1", format)
		}
	}
}

// TestJSONMatchesEncodingJSON holds the hand-written JSON report to the bytes
// encoding/json writes for the same report, strings that need escaping
// included.
func TestJSONMatchesEncodingJSON(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 40))
	for _, weird := range []string{"<script>&amp;</script>", "tab\there\nnew \"quoted\" \\ back", "\x00\x01\x1f\x7f", "é\u2028\u2029 \xff\xfe", "日本語"} {
		docs = append(docs, manifest.Document{Path: "weird.yaml", Line: 1, Data: fmt.Appendf(nil,
			"apiVersion: v1\nkind: Pod\nmetadata:\n  name: %q\n  namespace: %q\nspec:\n  hostNetwork: true\n  containers:\n  - name: %q\n    securityContext: {privileged: true}\n", weird, weird, weird)})
	}
	for _, n := range []int{0, len(docs)} {
		rep, errs := eval.Evaluate(context.Background(), eng, docs[:n], eval.Options{Jobs: 2, Format: "json"})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		kept, _ := eval.Evaluate(context.Background(), eng, docs[:n], eval.Options{Jobs: 1})
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		if err := enc.Encode(kept); err != nil {
			t.Fatal(err)
		}
		for _, r := range []*eval.Report{rep, kept} {
			if got := render(t, r, "json"); got != want.String() {
				t.Fatalf("%d documents: JSON differs from encoding/json\n got: %.2000s\nwant: %.2000s", n, got, want.String())
			}
		}
	}
}

// TestJSONReportRefusesOtherFormats: a report evaluated for JSON keeps no
// results, so writing it as a table must fail rather than print no rows.
func TestJSONReportRefusesOtherFormats(t *testing.T) {
	eng := restrictedEngine(t)
	rep, _ := eval.Evaluate(context.Background(), eng, manifest.Split("p.yaml", stream(t, 3)), eval.Options{Format: "json"})
	if err := rep.Write(&bytes.Buffer{}, "table"); err == nil {
		t.Fatal("a JSON-only report was written as a table")
	}
}

// TestEvaluateStopsWhenInterrupted: an ended context stops the run early
// instead of evaluating every document into error results.
func TestEvaluateStopsWhenInterrupted(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 200))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, jobs := range []int{1, 3} {
		rep, errs := eval.Evaluate(ctx, eng, docs, eval.Options{Jobs: jobs})
		if rep.Objects() != 0 || len(rep.Results) != 0 || len(errs) != 0 {
			t.Fatalf("jobs=%d: an interrupted run evaluated %d objects into %d results (%v)", jobs, rep.Objects(), len(rep.Results), errs)
		}
	}
}

// TestReportsCarryTheCategory: each result of `portal eval -o json|yaml`
// names its rule's category, as reports and alerts do.
func TestReportsCarryTheCategory(t *testing.T) {
	eng := restrictedEngine(t)
	docs := manifest.Split("pods.yaml", stream(t, 1))
	for _, format := range []string{"json", "yaml"} {
		rep, errs := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 1, Format: format})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		var out eval.Report
		if err := yaml.Unmarshal([]byte(render(t, rep, format)), &out); err != nil {
			t.Fatal(err)
		}
		cats := map[string]bool{}
		for _, r := range out.Results {
			cats[r.Category] = true
		}
		if len(out.Results) == 0 || len(cats) != 2 || !cats["Pod Security Standards (Baseline)"] || !cats["Pod Security Standards (Restricted)"] {
			t.Errorf("%s: categories %v, want the two of the pod-security bundle", format, cats)
		}
	}
}
