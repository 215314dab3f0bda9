package eval_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/manifest"
)

// TestEvaluateShapesAgree: the same pods give the same report, byte for
// byte and in input order, in every input shape and with any number of
// workers: a List's items, cut and spread across the workers, are reported
// as the documents of a YAML stream are.
func TestEvaluateShapesAgree(t *testing.T) {
	const pods = 500
	eng := restrictedEngine(t)
	dir := t.TempDir()
	docs := manifest.Split("pods.yaml", shapeInput(t, "block", pods))
	want, errs := eval.Evaluate(context.Background(), eng, docs, eval.Options{Jobs: 1, Format: "json"})
	if len(errs) > 0 || want.Objects() != pods {
		t.Fatalf("block: %v, %d objects", errs, want.Objects())
	}
	wantJSON := render(t, want, "json")
	for _, shape := range inputShapes {
		path := filepath.Join(dir, shape)
		if err := os.WriteFile(path, shapeInput(t, shape, pods), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, jobs := range []int{1, 3} {
			rep, errs, err := eval.EvaluateStream(context.Background(), eng, manifest.StreamItems([]string{path}, nil),
				eval.Options{Jobs: jobs, Format: "json", SpillDir: dir})
			if err != nil || len(errs) > 0 {
				t.Fatalf("%s, %d jobs: %v %v", shape, jobs, err, errs)
			}
			if got := render(t, rep, "json"); got != wantJSON {
				t.Fatalf("%s, %d jobs: the report differs from the block-style input's", shape, jobs)
			}
			rep.Close()
		}
	}
}
