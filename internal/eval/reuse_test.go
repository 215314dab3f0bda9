package eval_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/reuse"
	"github.com/vilaca/portal/internal/rule"
)

// TestReusedMapsChangeNoResult: portal eval's workers decode each object
// into the maps of the one before and build its rule environment from
// them. Every result must be what fresh maps give, on every example
// manifest and rule test input against the example rules, in one stream,
// so that each object is decoded into maps another kind of object left.
func TestReusedMapsChangeNoResult(t *testing.T) {
	examples := filepath.Join("..", "..", "examples")
	eng := engine.New(exprlang.New())
	var dirs []string
	for _, d := range []string{"pod-security", "best-practices", "other"} {
		dirs = append(dirs, filepath.Join(examples, "rules", d))
	}
	rules, errs := rule.LoadPaths(eng, dirs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	eng.SetRules(rules)

	var docs []manifest.Document
	err := filepath.WalkDir(examples, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || !(strings.Contains(path, "testdata") || strings.Contains(path, "manifests")) ||
			d.Name() == "portal-test.yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		docs = append(docs, manifest.Split(path, data)...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, manifest.Split("pods.yaml", stream(t, 30))...)

	ctx := context.Background()
	p := new(reuse.Pool)
	compared := 0
	for round := range 2 { // the second round decodes into what the whole first left
		for _, d := range docs {
			fresh, err := d.Objects()
			if err != nil {
				continue // rule tests' inputs include what does not decode
			}
			reused, err := d.ObjectsReusing(p)
			if err != nil {
				t.Fatalf("%s:%d: fresh maps decode, reused ones do not: %v", d.Path, d.Line, err)
			}
			for i, obj := range fresh {
				want, wantErr := eng.Evaluate(ctx, obj, engine.Options{})
				got, gotErr := eng.EvaluateAppend(ctx, reused[i], engine.Options{Reuse: p}, nil)
				if !reflect.DeepEqual(summaries(got), summaries(want)) || (gotErr == nil) != (wantErr == nil) {
					t.Fatalf("round %d, %s:%d, %s %s: from reused maps\n%v (%v)\nfrom fresh maps\n%v (%v)",
						round, d.Path, d.Line, obj.GetKind(), obj.GetName(), summaries(got), gotErr, summaries(want), wantErr)
				}
				if !reflect.DeepEqual(reused[i].Object, obj.Object) {
					t.Fatalf("%s:%d: evaluating changed the object decoded into reused maps", d.Path, d.Line)
				}
				p.Release(reused[i].Object)
				compared += len(want)
			}
		}
	}
	if compared < 1000 {
		t.Fatalf("only %d results compared: the examples did not load", compared)
	}
}

func summaries(rs []core.Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = strings.Join([]string{r.Rule.Name, string(r.Outcome), r.Container, r.ContainerType, r.Message, r.Resource.Kind, r.Resource.Namespace, r.Resource.Name}, "|")
	}
	return out
}
