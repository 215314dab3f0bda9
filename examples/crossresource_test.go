package examples_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

const crossResourceDir = "rules/cross-resource"

// readObjects reads every object of the manifest file at path.
func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, d := range manifest.Split(path, data) {
		objs, err := d.Objects()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, objs...)
	}
	return out
}

// TestCrossResource evaluates each cross-resource rule against the cluster
// its testdata/<rule>/cluster.yaml describes, read through the cluster
// cache's manifest reader as `portal eval --cluster-state` reads it: every
// object of the rule's kinds named bad-* must fail, every good-* must pass.
// An admission.yaml beside it holds objects created at admission against
// that cluster, with the same naming.
func TestCrossResource(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(crossResourceDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rules under %s: %v", crossResourceDir, err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(crossResourceDir, "testdata", name)
			state := readObjects(t, filepath.Join(dir, "cluster.yaml"))
			var b clustercache.StaticBuilder
			for _, o := range state {
				if err := b.Add(o, "cluster.yaml"); err != nil {
					t.Fatal(err)
				}
			}
			cluster := lookup.FromReader{R: b.Build()}
			eng := engine.New(exprlang.New(), engine.WithBinder(lookup.New(lookup.Options{Cache: cluster, Resolver: cluster})))
			rules, errs := rule.LoadPaths(eng, []string{file})
			if len(errs) > 0 || len(rules) != 1 {
				t.Fatalf("load %s: %v", file, errs)
			}
			if len(rules[0].Lookups()) == 0 {
				t.Fatalf("%s makes no cluster.* lookup", file)
			}
			eng.SetRules(rules)
			check := func(objs []*unstructured.Unstructured, opts engine.Options) (bad, good int) {
				for _, o := range objs {
					res, err := eng.Evaluate(context.Background(), o, opts)
					if err != nil {
						t.Fatal(err)
					}
					if len(res) == 0 {
						continue
					}
					n := o.GetNamespace() + "/" + o.GetName()
					failed := slices.ContainsFunc(res, func(r core.Result) bool { return r.Outcome == core.OutcomeFail })
					for _, r := range res {
						if r.Outcome == core.OutcomeError {
							t.Errorf("%s %s: evaluation error: %s", o.GetKind(), n, r.Message)
						}
					}
					switch {
					case strings.HasPrefix(o.GetName(), "bad-"):
						bad++
						if !failed {
							t.Errorf("%s %s passes, want a finding", o.GetKind(), n)
						}
					case strings.HasPrefix(o.GetName(), "good-"):
						good++
						if failed {
							t.Errorf("%s %s fails: %s", o.GetKind(), n, res[0].Message)
						}
					}
				}
				return bad, good
			}
			bad, good := check(state, engine.Options{Mode: core.ModeAudit})
			if bad == 0 || good == 0 {
				t.Errorf("cluster.yaml has %d bad-* and %d good-* objects the rule matches; want both", bad, good)
			}
			if _, err := os.Stat(filepath.Join(dir, "admission.yaml")); err == nil {
				bad, good := check(readObjects(t, filepath.Join(dir, "admission.yaml")), engine.Options{Mode: core.ModeAdmission, Request: &core.Request{Operation: "CREATE"}})
				if bad == 0 || good == 0 {
					t.Errorf("admission.yaml has %d bad-* and %d good-* objects; want both", bad, good)
				}
			}
		})
	}
}
