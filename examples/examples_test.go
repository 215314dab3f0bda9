// Package examples_test checks the example rule bundles and manifests: every
// rule file loads, every test file (portal-test.yaml) passes as `portal test
// examples/` would run it, and every rule has one.
package examples_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval/ruletest"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

const (
	rulesDir         = "rules"
	bestPracticesDir = "rules/best-practices"
	podSecurityDir   = "rules/pod-security"
	manifestsDir     = "manifests"
	// legacyDir holds SpEL input for the converter, not Portal rules.
	legacyDir = "rules/poc"
)

// load compiles the rules in paths into a fresh engine and fails the test on
// any load error.
func load(t *testing.T, paths ...string) (*engine.Engine, []*engine.Rule) {
	t.Helper()
	eng := engine.New(exprlang.New())
	rules, errs := rule.LoadPaths(eng, paths)
	for _, err := range errs {
		t.Errorf("load rules: %v", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	eng.SetRules(rules)
	return eng, rules
}

// evaluate runs every rule of eng, whatever its mode, on each object in the
// manifest file at path.
func evaluate(t *testing.T, eng *engine.Engine, path string) []core.Result {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs := manifest.Split(path, data)
	if len(docs) == 0 {
		t.Fatalf("%s holds no documents", path)
	}
	var out []core.Result
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range objs {
			res, err := eng.Evaluate(context.Background(), obj, engine.Options{})
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			out = append(out, res...)
		}
	}
	return out
}

func describe(r core.Result) string {
	s := r.Resource.Kind + " " + r.Resource.Namespace + "/" + r.Resource.Name
	if r.Container != "" {
		s += " container " + r.Container
	}
	return s + ": " + string(r.Outcome) + ": " + r.Message
}

// bestPracticeFiles lists the rule files of the best-practices bundle: the
// YAML files at its top level (testdata/ holds the fixtures).
func bestPracticeFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(bestPracticesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 12 {
		t.Fatalf("%s holds %d rule files, want at least 12", bestPracticesDir, len(files))
	}
	return files
}

func TestBestPractices(t *testing.T) {
	files := bestPracticeFiles(t)
	eng, rules := load(t, files...)

	// One rule per file, named after the file, with a fixture folder of the
	// same name.
	fixtures := map[string]string{} // rule name -> fixture folder
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".yaml")
		var in []string
		for _, r := range rules {
			if r.Source.Path == f {
				in = append(in, r.Name)
			}
		}
		if len(in) != 1 || in[0] != base {
			t.Errorf("%s: holds rules %v, want exactly one rule named %q", f, in, base)
			continue
		}
		fixtures[base] = filepath.Join(bestPracticesDir, "testdata", base)
	}
	entries, err := os.ReadDir(filepath.Join(bestPracticesDir, "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := fixtures[e.Name()]; !ok {
			t.Errorf("testdata/%s has no rule file %s.yaml", e.Name(), e.Name())
		}
	}

	// What each rule decides on its fixtures is in testdata/<rule>/
	// portal-test.yaml (TestRuleTestFiles); here, what a test file cannot
	// say: each test file is there, and the messages render.
	for _, r := range rules {
		t.Run(r.Name, func(t *testing.T) {
			if !strings.Contains(r.Message, "{{") {
				t.Errorf("message %q has no {{ }} hole", r.Message)
			}
			dir := fixtures[r.Name]
			if dir == "" {
				t.Fatalf("no fixtures")
			}
			if _, err := os.Stat(filepath.Join(dir, ruletest.FileName)); err != nil {
				t.Errorf("no test file: %v", err)
			}
			for _, res := range evaluate(t, eng, filepath.Join(dir, "bad.yaml")) {
				if res.Rule.Name == r.Name && (strings.Contains(res.Message, "<error") || strings.Contains(res.Message, "<nil>") || strings.Contains(res.Message, "\n")) {
					t.Errorf("message renders badly: %q", res.Message)
				}
			}
		})
	}
}

// TestRuleFilesLoad loads every rule file under rules/ on its own, except the
// legacy SpEL input and test fixtures.
func TestRuleFilesLoad(t *testing.T) {
	files := ruleFiles(t)
	if len(files) == 0 {
		t.Fatalf("no rule files under %s", rulesDir)
	}
	for _, f := range files {
		t.Run(filepath.ToSlash(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rules, errs := rule.CompileFile(engine.New(exprlang.New()), f, data)
			for _, err := range errs {
				t.Error(err)
			}
			if len(errs) == 0 && len(rules) == 0 {
				t.Error("holds no rules")
			}
		})
	}
}

func readManifests(t *testing.T) []manifest.Document {
	t.Helper()
	docs, err := manifest.ReadPaths([]string{manifestsDir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatalf("no manifests in %s", manifestsDir)
	}
	return docs
}

func TestManifestsParse(t *testing.T) {
	kinds := map[string]int{}
	docsPerFile := map[string]int{}
	lists := 0
	for _, d := range readManifests(t) {
		docsPerFile[d.Path]++
		objs, err := d.Objects()
		if err != nil {
			t.Error(err)
			continue
		}
		if len(objs) == 0 {
			t.Errorf("%s:%d: no objects", d.Path, d.Line)
		}
		if len(objs) > 1 {
			lists++
		}
		for _, o := range objs {
			if o.GetName() == "" || o.GetNamespace() == "" {
				t.Errorf("%s:%d: %s without name or namespace", d.Path, d.Line, o.GetKind())
			}
			kinds[o.GetKind()]++
		}
	}
	if kinds["Pod"] == 0 || kinds["Deployment"] == 0 {
		t.Errorf("want Pods and Deployments, got %v", kinds)
	}
	// The demo shows off the input forms portal eval reads.
	if lists == 0 {
		t.Error("want a kind: List manifest")
	}
	multi := false
	for _, n := range docsPerFile {
		multi = multi || n > 1
	}
	if !multi {
		t.Error("want a multi-document manifest file")
	}
}

// ruleFiles lists every rule file under rules/: not the legacy SpEL input,
// test fixtures or test files.
func ruleFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(rulesDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == legacyDir || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && filepath.Ext(path) == ".yaml" && d.Name() != ruletest.FileName {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
