package ruletest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/didyoumean"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/exception"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

// Options tunes Run.
type Options struct {
	// Lookups makes the binder that serves the rules' cluster.* lookups
	// from a test's clusterState (the composition root passes the lookup
	// layer's; this package may not import it). nil: a rule that reads the
	// cluster errors, as it would in portal eval without --cluster-state.
	Lookups func(clustercache.Reader) engine.Binder
	// Budget is each rule evaluation's budget; zero means the default.
	Budget exprlang.Limits
	// Replay evaluates the runtime rules of eng on the recorded audit log
	// at path, its targets read from cluster (nil: none), and returns the
	// findings (the composition root passes the runtime layer's replay,
	// as portal eval --events runs it). nil: a test with events is broken.
	Replay func(ctx context.Context, eng *engine.Engine, cluster clustercache.Reader, path string) ([]Finding, error)
	// Root is the directory every file a test reads must resolve under,
	// links followed: the directory portal test was given. Empty: the test
	// file's own directory.
	Root string
}

// Finding is what a runtime rule raised on replaying a recorded event.
type Finding struct {
	Rule              string
	Resource          ResourceID
	EnforcementAction core.EnforcementAction
	Message           string
}

// Check is one expectation and what the run gave for it.
type Check struct {
	Expectation
	// Got is the result the rule gave the resource (the container's, when
	// the expectation names one): one of Results, "none" when the rule gave
	// it none (it does not match it, or no result names that container),
	// or several joined by commas when its containers differ.
	Got string
	// Messages are the messages of those results.
	Messages []string
	// OK: Got is the expected result, and the message, when one is
	// expected, is in one of Messages.
	OK bool
}

// FileResult is the outcome of one test file.
type FileResult struct {
	// Path is the test file's path.
	Path string
	// Name is the test's name (its path when it has none).
	Name string
	// Err is set when the test is broken: it could not be run or an
	// expectation names a rule or resource the test does not have. Checks
	// is then empty.
	Err error
	// Checks holds one entry per expectation, in the file's order.
	Checks []Check
	// Unasserted counts the results the file says nothing of (ignored).
	Unasserted int
}

// Mismatches counts the checks that failed.
func (r *FileResult) Mismatches() int {
	n := 0
	for _, c := range r.Checks {
		if !c.OK {
			n++
		}
	}
	return n
}

// Find lists the test files at paths: a file is taken as it is, whatever
// its name; a directory is walked (hidden directories skipped, testdata
// not, since fixtures and their tests live there) for files named FileName.
// A file reached twice is listed once.
func Find(paths []string) ([]string, error) {
	var out []string
	seen := manifest.FileSet{}
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			if seen.First(p) {
				out = append(out, p)
			}
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && path != p && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if !d.IsDir() && d.Name() == FileName && seen.First(path) {
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Target is a test file to run and the root what it reads must stay under.
type Target struct{ Path, Root string }

// Targets finds the test files at paths as Find does, each with its root:
// root when it is set, else DefaultRoot of the path it was found under. A
// file reached twice is listed once, with the root it was first reached
// under.
func Targets(paths []string, root string) ([]Target, error) {
	var out []Target
	seen := manifest.FileSet{}
	cwd, _ := os.Getwd()
	for _, p := range paths {
		files, err := Find([]string{p})
		if err != nil {
			return nil, err
		}
		r := root
		if r == "" {
			r = DefaultRoot(p, cwd)
		}
		for _, f := range files {
			if seen.First(f) {
				out = append(out, Target{Path: f, Root: r})
			}
		}
	}
	return out, nil
}

// DefaultRoot is the root of the tests found at p when --root is not
// given: the working directory when p is under it (CI runs `portal test`
// from the checkout, so a test may name the rules of the folders above it,
// and nothing outside the checkout), else p itself, or a file's directory.
func DefaultRoot(p, cwd string) string {
	abs := p
	if !filepath.IsAbs(p) {
		abs = filepath.Join(cwd, p)
	}
	if cwd != "" {
		if rel, err := filepath.Rel(cwd, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "."
		}
	}
	if info, err := os.Stat(p); err == nil && !info.IsDir() {
		return filepath.Dir(p)
	}
	return p
}

// Run reads the test file at path, runs it and compares. A broken test is
// reported in the result's Err, never as an error of its own, so one broken
// file does not hide the others' results.
func Run(ctx context.Context, path string, o Options) FileResult {
	res := FileResult{Path: path, Name: path}
	root := o.Root
	if root == "" {
		root = filepath.Dir(path)
	}
	c, err := newConfine(root, path)
	if err != nil {
		res.Err = err
		return res
	}
	data, err := c.readBounded(path)
	if err != nil {
		res.Err = err
		return res
	}
	f, err := Parse(path, data)
	if err != nil {
		res.Err = err
		return res
	}
	res.Name = f.Title()
	res.Checks, res.Unasserted, res.Err = run(ctx, f, c, o)
	return res
}

// fixedClock is the test file's now: the time exceptions expire against.
type fixedClock time.Time

func (c fixedClock) Now() time.Time                  { return time.Time(c) }
func (c fixedClock) Since(t time.Time) time.Duration { return time.Time(c).Sub(t) }

// run loads what f names, relative to f and confined by c, evaluates its
// resources and compares the results with its expectations.
func run(ctx context.Context, f *File, c *confine, o Options) ([]Check, int, error) {
	eng, cluster, loaded, err := load(f, c, o)
	if err != nil {
		return nil, 0, err
	}
	files, err := c.all(paths(f.Resources))
	if err != nil {
		return nil, 0, fmt.Errorf("%s: resources: %w", f.Path, err)
	}
	docs, err := manifest.ReadPaths(files, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: resources: %w", f.Path, err)
	}
	for _, r := range f.Resources {
		if r.Inline != nil {
			docs = append(docs, manifest.Document{Path: f.Path, Line: r.Line, Data: r.Inline})
		}
	}
	// No output format: the report keeps every Result, passes included,
	// which the expectations are compared with.
	rep, errs := eval.Evaluate(ctx, eng, docs, eval.Options{Mode: core.Mode(f.Mode), Jobs: 1})
	if len(errs) > 0 {
		return nil, 0, fmt.Errorf("%s: resources: %w", f.Path, errors.Join(errs...))
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	objects, err := resourceIDs(docs)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: resources: %w", f.Path, err)
	}
	// A rule of mode runtime judges events, not objects: what it gave an
	// object without one is no verdict.
	results := slices.DeleteFunc(rep.Results, func(r eval.Result) bool { return loaded[r.Rule] })
	if len(f.Events) > 0 {
		found, err := replay(ctx, f, c, eng, cluster, o)
		if err != nil {
			return nil, 0, err
		}
		results = append(results, found...)
		// A finding may name an object the test does not list (a Secret
		// read): an expectation may name it too.
		for _, r := range found {
			objects[ResourceID{Kind: r.Resource.Kind, Namespace: r.Resource.Namespace, Name: r.Resource.Name}] = true
		}
	}
	return compare(f, results, loaded, objects)
}

// replay runs the runtime rules on f's events and returns their findings
// as fail results (warn for a rule that warns).
func replay(ctx context.Context, f *File, c *confine, eng *engine.Engine, cluster clustercache.Reader, o Options) ([]eval.Result, error) {
	if o.Replay == nil {
		return nil, fmt.Errorf("%s: events: this build cannot replay events", f.Path)
	}
	logs, err := c.all(f.Events)
	if err != nil {
		return nil, fmt.Errorf("%s: events: %w", f.Path, err)
	}
	var out []eval.Result
	for _, p := range logs {
		found, err := o.Replay(ctx, eng, cluster, p)
		if err != nil {
			return nil, fmt.Errorf("%s: events: %w", f.Path, err)
		}
		for _, x := range found {
			out = append(out, eval.Result{Rule: x.Rule, Result: ResultFail, EnforcementAction: string(x.EnforcementAction), Message: x.Message,
				Resource: eval.Resource{Kind: x.Resource.Kind, Namespace: x.Resource.Namespace, Name: x.Resource.Name}})
		}
	}
	return out, nil
}

// resourceIDs lists the objects of docs by the name an expectation gives
// them. Two objects of one name are an error naming both places: an
// expectation could not say which of the two it is about.
func resourceIDs(docs []manifest.Document) (map[ResourceID]bool, error) {
	where := map[ResourceID]string{}
	var errs []error
	for _, d := range docs {
		// Evaluate decoded every document already, so this cannot fail.
		objs, _ := d.Objects()
		for _, u := range objs {
			id := ResourceID{Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
			at := fmt.Sprintf("%s:%d", d.Path, d.Line)
			if prev, ok := where[id]; ok {
				errs = append(errs, fmt.Errorf("%s is defined twice, at %s and at %s: give each object of a test its own name", id, prev, at))
				continue
			}
			where[id] = at
		}
	}
	ids := make(map[ResourceID]bool, len(where))
	for id := range where {
		ids[id] = true
	}
	return ids, errors.Join(errs...)
}

// load builds the engine f's rules run in: its cluster state behind the
// lookups, its exceptions, its clock; and returns the cluster state (nil
// when f has none) and the rules: each name, and whether the rule runs
// only on events (mode runtime).
func load(f *File, c *confine, o Options) (*engine.Engine, clustercache.Reader, map[string]bool, error) {
	var opts []engine.Option
	var cluster clustercache.Reader
	if len(f.ClusterState) > 0 {
		files, err := c.all(f.ClusterState)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: clusterState: %w", f.Path, err)
		}
		state, errs := eval.LoadClusterState(files, nil)
		if len(errs) > 0 {
			return nil, nil, nil, fmt.Errorf("%s: clusterState: %w", f.Path, errors.Join(errs...))
		}
		cluster = state
		if o.Lookups != nil {
			opts = append(opts, engine.WithBinder(o.Lookups(state)))
		}
	}
	if f.Now != nil {
		opts = append(opts, engine.WithClock(fixedClock(*f.Now)))
	}
	limits := o.Budget
	if limits == (exprlang.Limits{}) {
		limits = exprlang.DefaultLimits()
	}
	eng := engine.New(exprlang.New(exprlang.WithLimits(limits)), opts...)
	ruleFiles, err := c.all(f.Rules)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: rules: %w", f.Path, err)
	}
	rules, errs := rule.LoadPaths(eng, ruleFiles)
	if len(errs) > 0 {
		return nil, nil, nil, fmt.Errorf("%s: rules: %w", f.Path, errors.Join(errs...))
	}
	if len(rules) == 0 {
		return nil, nil, nil, fmt.Errorf("%s: rules: no rule found in %s", f.Path, strings.Join(f.Rules, ", "))
	}
	eng.SetRules(rules)
	names := make(map[string]bool, len(rules))
	for _, r := range rules {
		names[r.Name] = r.HasMode(core.ModeRuntime) && !r.HasMode(core.ModeAdmission) && !r.HasMode(core.ModeAudit)
	}
	if len(f.Exceptions) > 0 {
		files, err := c.all(f.Exceptions)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: exceptions: %w", f.Path, err)
		}
		xs, errs := exception.LoadPaths(eng, files, nil)
		if len(errs) > 0 {
			return nil, nil, nil, fmt.Errorf("%s: exceptions: %w", f.Path, errors.Join(errs...))
		}
		eng.SetExceptions(xs)
	}
	return eng, cluster, names, nil
}

// key identifies the results one expectation is about.
type key struct {
	rule string
	res  ResourceID
}

// compare checks each expectation against the results. An expectation
// naming a rule or a resource the test does not load is a broken test (a
// typo would otherwise read as a mismatch, or worse, as nothing).
func compare(f *File, results []eval.Result, rules map[string]bool, objects map[ResourceID]bool) ([]Check, int, error) {
	by := map[key][]eval.Result{}
	for _, r := range results {
		k := key{r.Rule, ResourceID{Kind: r.Resource.Kind, Namespace: r.Resource.Namespace, Name: r.Resource.Name}}
		by[k] = append(by[k], r)
	}
	asserted := map[key]bool{}
	var errs []error
	checks := make([]Check, 0, len(f.Results))
	for _, e := range f.Results {
		id, _ := ParseResource(e.Resource) // Parse checked it
		at := func(err error) error { return &manifest.Error{Path: f.Path, Line: e.Line, Err: err} }
		runtimeOnly, ok := rules[e.Rule]
		if !ok {
			errs = append(errs, at(fmt.Errorf("rule %q is not among the rules the test loads%s", e.Rule, suggest(e.Rule, rules))))
			continue
		}
		if !objects[id] {
			errs = append(errs, at(fmt.Errorf("resource %s is not among the resources the test evaluates%s", id, suggest(id, objects))))
			continue
		}
		k := key{e.Rule, id}
		asserted[k] = true
		// A runtime rule reports findings only: replayed events that raised
		// none on a resource leave it passing.
		checks = append(checks, check(e, by[k], runtimeOnly && len(f.Events) > 0))
	}
	if len(errs) > 0 {
		return nil, 0, errors.Join(errs...)
	}
	unasserted := 0
	for k, rs := range by {
		if !asserted[k] {
			unasserted += len(rs)
		}
	}
	return checks, unasserted, nil
}

// check compares one expectation with the results of its rule on its
// resource: those of its container when it names one, else all of them.
// Every one must have the expected result, and the expected message must be
// in at least one.
func check(e Expectation, rs []eval.Result, noneIsPass bool) Check {
	c := Check{Expectation: e}
	var got []string
	for _, r := range rs {
		if e.Container != "" && r.Container != e.Container {
			continue
		}
		v := r.Result
		if v == ResultFail && r.EnforcementAction == string(core.ActionWarn) {
			v = ResultWarn
		}
		if !slices.Contains(got, v) {
			got = append(got, v)
		}
		c.Messages = append(c.Messages, r.Message)
	}
	if len(got) == 0 && noneIsPass {
		got = []string{ResultPass}
	}
	if len(got) == 0 {
		c.Got = "none"
		return c
	}
	c.Got = strings.Join(got, ",")
	c.OK = c.Got == e.Result && (e.Message == "" || slices.ContainsFunc(c.Messages, func(m string) bool { return strings.Contains(m, e.Message) }))
	return c
}

// suggest names the closest of names to name, as a "did you mean" clause.
func suggest[K comparable](name K, names map[K]bool) string {
	var all []string
	for n := range names {
		all = append(all, fmt.Sprint(n))
	}
	slices.Sort(all)
	if s := didyoumean.Closest(fmt.Sprint(name), all); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	return ""
}
