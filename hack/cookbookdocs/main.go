// Command cookbookdocs writes the cookbook (docs/cookbook/) from the rule
// bundles in examples/rules/best-practices and examples/rules/other (the
// rule library, docs/library.md): one page per rule, with why it
// exists (the rule file's leading comment), the rule itself, what it flags in
// its bad fixture (evaluated here, by the same engine `portal eval` uses, so
// the messages on the page are the ones users see) and what passes in its
// good fixture, and its test file (portal-test.yaml) with what `portal test`
// prints for it; and an index of the rules. It writes a page per check of the
// NetworkPolicy analyser too, from examples/networkpolicies (network.go). `make docs-generate` writes the
// pages, `make docs` (-check) fails when one is stale, missing or left over
// from a removed rule, or when mkdocs.yml does not list a page.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/eval/ruletest"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

func main() {
	root := flag.String("root", ".", "the repository root")
	check := flag.Bool("check", false, "do not write: fail when a page differs from what would be written")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "cookbookdocs:", err)
		os.Exit(1)
	}
}

const (
	bundleDir   = "examples/rules/best-practices"
	otherDir    = "examples/rules/other"
	cookbookDir = "docs/cookbook"
)

// bundleDirs are the bundles with a page per rule, in the index's order.
var bundleDirs = []string{bundleDir, otherDir}

// recipe is one rule of the bundle and what its fixtures give.
type recipe struct {
	Name, File, Why, Source, Bad, Good string
	Severity, Action, Category         string
	// Bundle is the rule's folder, relative to the repository root.
	Bundle      string
	Mode, Kinds []string
	Failures    []core.Result
	// BadEval and GoodEval are what `portal eval` prints for the fixtures,
	// and BadStatus its exit status for the bad one.
	BadEval, GoodEval string
	BadStatus         int
	// Test is the rule's test file (testdata/<rule>/portal-test.yaml) and
	// TestRun what `portal test` prints for it.
	Test, TestRun string
}

func run(root string, check bool) error {
	var files []string
	for _, dir := range bundleDirs {
		fs, err := filepath.Glob(filepath.Join(root, dir, "*.yaml"))
		if err != nil {
			return err
		}
		files = append(files, fs...)
	}
	if len(files) == 0 {
		return fmt.Errorf("no rules in %s", bundleDir)
	}
	var recipes []recipe
	for _, f := range files {
		r, err := load(root, f)
		if err != nil {
			return err
		}
		recipes = append(recipes, r)
	}
	guides, err := handWritten(filepath.Join(root, cookbookDir))
	if err != nil {
		return err
	}
	netRecipes, err := loadNetwork(root)
	if err != nil {
		return err
	}
	pages := map[string][]byte{"index.md": renderIndex(recipes, netRecipes, guides)}
	for _, r := range recipes {
		pages[r.Name+".md"] = renderRecipe(r)
	}
	for _, r := range netRecipes {
		pages[r.Page+".md"] = renderNetworkRecipe(r)
	}
	nav, err := os.ReadFile(filepath.Join(root, "mkdocs.yml"))
	if err != nil {
		return err
	}
	var errs []error
	dir := filepath.Join(root, cookbookDir)
	if !check {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(pages)) {
		path := filepath.Join(dir, name)
		if !bytes.Contains(nav, []byte("cookbook/"+name)) {
			errs = append(errs, fmt.Errorf("mkdocs.yml: the nav does not list cookbook/%s", name))
		}
		if !check {
			if err := os.WriteFile(path, pages[name], 0o644); err != nil {
				return err
			}
			continue
		}
		current, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if !bytes.Equal(current, pages[name]) {
			errs = append(errs, fmt.Errorf("%s is out of date with %s: run make docs-generate and commit it", filepath.Join(cookbookDir, name), bundleDir))
		}
	}
	// A page whose rule is gone would stay on the site, describing nothing.
	existing, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	for _, p := range existing {
		if _, ok := pages[filepath.Base(p)]; !ok && !isGuide(guides, filepath.Base(p)) {
			errs = append(errs, fmt.Errorf("%s has no rule in %s: delete it", filepath.Join(cookbookDir, filepath.Base(p)), bundleDir))
		}
	}
	return errors.Join(errs...)
}

func load(root, file string) (recipe, error) {
	r, err := parseRecipe(root, file)
	if err != nil {
		return recipe{}, err
	}
	fixtures := filepath.Join(filepath.Dir(file), "testdata", r.Name)
	bad, err := os.ReadFile(filepath.Join(fixtures, "bad.yaml"))
	if err != nil {
		return recipe{}, err
	}
	good, err := os.ReadFile(filepath.Join(fixtures, "good.yaml"))
	if err != nil {
		return recipe{}, err
	}
	r.Bad, r.Good = string(bad), string(good)
	eng := engine.New(exprlang.New())
	rules, errs := rule.LoadPaths(eng, []string{file})
	if err := errors.Join(errs...); err != nil {
		return recipe{}, err
	}
	eng.SetRules(rules)
	path := filepath.Join(fixtures, "bad.yaml")
	if r.Failures, err = failures(eng, path, bad); err != nil {
		return recipe{}, err
	}
	if len(r.Failures) == 0 {
		return recipe{}, fmt.Errorf("%s: nothing in the bad fixture fails %s", path, r.Name)
	}
	var denied bool
	if r.BadEval, denied, err = evalTable(eng, path, bad); err != nil {
		return recipe{}, err
	}
	if denied {
		r.BadStatus = 1
	}
	if r.GoodEval, _, err = evalTable(eng, filepath.Join(fixtures, "good.yaml"), good); err != nil {
		return recipe{}, err
	}
	if r.Test, r.TestRun, err = ruleTest(filepath.Join(fixtures, ruletest.FileName)); err != nil {
		return recipe{}, err
	}
	return r, nil
}

// ruleTest reads a rule's test file and runs it as `portal test` does; a
// test that does not pass is an error, so no page shows one.
func ruleTest(path string) (string, string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("every cookbook rule has a test file: %w", err)
	}
	// The test names its rule at ../../, beside the rule's testdata.
	res := ruletest.Run(context.Background(), path, ruletest.Options{Root: filepath.Dir(filepath.Dir(filepath.Dir(path)))})
	if res.Err != nil {
		return "", "", res.Err
	}
	if n := res.Mismatches(); n > 0 {
		return "", "", fmt.Errorf("%s: %d expectations do not match: run portal test on it", path, n)
	}
	var b bytes.Buffer
	if err := ruletest.Write(&b, "table", []ruletest.FileResult{res}); err != nil {
		return "", "", err
	}
	return string(src), b.String(), nil
}

// parseRecipe reads what the page shows of a rule file: its fields and the
// leading comment that says why the rule exists.
func parseRecipe(root, file string) (recipe, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return recipe{}, err
	}
	var spec struct {
		Name              string   `yaml:"name"`
		Severity          string   `yaml:"severity"`
		Category          string   `yaml:"category"`
		EnforcementAction string   `yaml:"enforcementAction"`
		Mode              []string `yaml:"mode"`
		Match             struct {
			GVK []struct{ Group, Kind string } `yaml:"gvk"`
		} `yaml:"match"`
	}
	if err := yaml.Unmarshal(src, &spec); err != nil {
		return recipe{}, fmt.Errorf("%s: %w", file, err)
	}
	rel, _ := filepath.Rel(root, file)
	r := recipe{Name: spec.Name, File: filepath.ToSlash(rel), Source: string(src), Bundle: filepath.ToSlash(filepath.Dir(rel)),
		Severity: spec.Severity, Category: spec.Category, Action: spec.EnforcementAction, Mode: spec.Mode}
	for _, g := range spec.Match.GVK {
		k := g.Kind
		if g.Group != "" {
			k = g.Group + "/" + g.Kind
		}
		r.Kinds = append(r.Kinds, k)
	}
	var why []string
	for _, line := range strings.Split(r.Source, "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		why = append(why, strings.TrimSpace(strings.TrimPrefix(line, "#")))
	}
	r.Why = strings.Join(strings.Fields(strings.Join(why, " ")), " ")
	if r.Name == "" || r.Why == "" {
		return recipe{}, fmt.Errorf("%s: a cookbook rule needs a name and a leading comment saying why it exists", file)
	}
	return r, nil
}

// failures evaluates every object of the manifest file data (read from
// path) and returns the results that did not pass.
func failures(eng *engine.Engine, path string, data []byte) ([]core.Result, error) {
	var failed []core.Result
	for _, d := range manifest.Split(path, data) {
		objs, err := d.Objects()
		if err != nil {
			return nil, err
		}
		for _, obj := range objs {
			res, err := eng.Evaluate(context.Background(), obj, engine.Options{})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			for _, x := range res {
				if x.Outcome != core.OutcomePass {
					failed = append(failed, x)
				}
			}
		}
	}
	return failed, nil
}

// evalTable is what `portal eval` prints for one manifest file, and whether
// it exits 1 (a deny rule failed).
func evalTable(eng *engine.Engine, path string, data []byte) (string, bool, error) {
	rep, errs := eval.Run(eng, manifest.Split(path, data), "")
	if err := errors.Join(errs...); err != nil {
		return "", false, err
	}
	var b bytes.Buffer
	if err := rep.Write(&b, "table"); err != nil {
		return "", false, err
	}
	return b.String(), rep.Denied(), nil
}

const header = `<!-- Generated by hack/cookbookdocs from examples/rules/best-practices and examples/rules/other:
edit the rule or its fixtures there and run make docs-generate; make docs fails when this
page is stale. -->
`

// guide is a hand-written cookbook page (one that does not start with the
// generated header): the index links it under its title.
type guide struct{ File, Title string }

// handWritten lists the hand-written pages of dir by file name.
func handWritten(dir string) ([]guide, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	var out []guide
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if bytes.HasPrefix(data, []byte(header[:30])) {
			continue
		}
		title := strings.TrimSuffix(filepath.Base(f), ".md")
		for _, line := range strings.Split(string(data), "\n") {
			if t, ok := strings.CutPrefix(line, "# "); ok {
				title = strings.TrimSpace(t)
				break
			}
		}
		out = append(out, guide{File: filepath.Base(f), Title: title})
	}
	return out, nil
}

func isGuide(gs []guide, file string) bool {
	return slices.ContainsFunc(gs, func(g guide) bool { return g.File == file })
}

func renderIndex(rs []recipe, nrs []netRecipe, guides []guide) []byte {
	var b strings.Builder
	b.WriteString(header + `
# Cookbook

Everyday rules, ready to copy: the best-practices bundle in
` + "`examples/rules/best-practices`" + ` and the rest of the [rule library](../library.md) in
` + "`examples/rules/other`" + `. Each page says why the rule exists, shows the rule,
and what it flags and lets through, with the messages ` + "`portal eval`" + ` prints for its
fixtures, and its test file: what ` + "`portal test`" + ` checks the rule decides on each of them.
Load them all with ` + "`portal eval --rules examples/rules/best-practices --file <manifests>`" + `,
or apply one as a [` + "`PortalClusterRule`" + `](../reference/crd/portalclusterrule.md): the
rule file is its ` + "`spec`" + `. For the Pod Security Standards, see
` + "`examples/rules/pod-security`" + `.
The commands write ` + "`portal`" + ` and ` + "`kubectl`" + `: from the repository,
` + "`export PATH=$PWD/bin/k8s:$PWD/bin:$PATH`" + ` finds the ones ` + "`make run`" + ` (or
` + "`make build`" + `) built, as [the tutorial](../getting-started/first-rule.md#1-start-portal-dev) does.

`)
	for i, dir := range bundleDirs {
		if i > 0 {
			fmt.Fprintf(&b, "\n## %s\n\nIn `%s`, the rules of Kyverno's \"other\" policies that Portal can express; the [library](../library.md) maps each to its Kyverno policy.\n\n", "Other", dir)
		}
		b.WriteString("| rule | category | severity | action | loops |\n|---|---|---|---|---|\n")
		for _, r := range rs {
			if r.Bundle == dir {
				fmt.Fprintf(&b, "| [%s](%s.md) | %s | %s | %s | %s |\n", r.Name, r.Name, r.Category, r.Severity, r.Action, strings.Join(r.Mode, ", "))
			}
		}
	}
	renderNetworkIndex(&b, nrs)
	if len(guides) > 0 {
		b.WriteString("\n## Guides\n\nStep-by-step pages for other layers, written by hand:\n\n")
		for _, g := range guides {
			fmt.Fprintf(&b, "- [%s](%s)\n", g.Title, g.File)
		}
	}
	return []byte(b.String())
}

func renderRecipe(r recipe) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n# %s\n\n%s\n\n", header, r.Name, r.Why)
	fmt.Fprintf(&b, "| | |\n|---|---|\n| severity | `%s` |\n| category | %s |\n| enforcementAction | `%s` |\n| mode | %s |\n| kinds | %s |\n| file | `%s` |\n\n",
		r.Severity, r.Category, r.Action, code(r.Mode), code(r.Kinds), r.File)
	fmt.Fprintf(&b, "## The rule\n\n```yaml\n%s\n```\n\n", strings.TrimRight(r.Source, "\n"))
	fmt.Fprintf(&b, "## What it flags\n\n```yaml\n%s\n```\n\n", strings.TrimRight(r.Bad, "\n"))
	b.WriteString("Each of these gives a result:\n\n| object | container | outcome | message |\n|---|---|---|---|\n")
	for _, f := range r.Failures {
		obj := f.Resource.Kind + " " + f.Resource.Name
		if f.Resource.Namespace != "" {
			obj = f.Resource.Kind + " " + f.Resource.Namespace + "/" + f.Resource.Name
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", obj, f.Container, f.Outcome, cell(f.Message))
	}
	fmt.Fprintf(&b, "\n## What passes\n\n```yaml\n%s\n```\n\n", strings.TrimRight(r.Good, "\n"))
	dir := r.Bundle + "/testdata/" + r.Name
	fmt.Fprintf(&b, "## Try it\n\nFrom the repository, with `bin/portal` (`make build`) on the `PATH`:\n\n<!-- runnable -->\n```console\n$ portal eval --rules %s --file %s/bad.yaml\n%s$ echo $?\n%d\n$ portal eval --rules %s --file %s/good.yaml\n%s```\n",
		r.File, dir, r.BadEval, r.BadStatus, r.File, dir, r.GoodEval)
	if r.BadStatus == 0 {
		fmt.Fprintf(&b, "\n`portal eval` exits 0: a `%s` rule reports, but only a failing `deny` rule makes it exit 1.\n", r.Action)
	}
	fmt.Fprintf(&b, "\n## Its test\n\nWhat the rule must decide on each fixture, as a [test file](../reference/test-file.md) `portal test` runs in CI (`%s/%s`):\n\n```yaml\n%s\n```\n\n<!-- runnable -->\n```console\n$ portal test --root %s %s\n%s```\n",
		dir, ruletest.FileName, strings.TrimRight(r.Test, "\n"), r.Bundle, dir, r.TestRun)
	return []byte(b.String())
}

func code(xs []string) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = "`" + x + "`"
	}
	return strings.Join(out, ", ")
}

func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}
