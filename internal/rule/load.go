package rule

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/manifest"
)

// Compiler compiles parsed rules; *engine.Engine is one. LoadPaths calls
// Compile from several goroutines at once.
type Compiler interface {
	Compile(r *core.Rule) (*engine.Rule, error)
}

// CompileFile parses and compiles the rules in one file. A rule that does not
// parse or compile is returned as errors located at the line and column of
// each problem (the character of an expression, too) and is left out; the
// rest load.
func CompileFile(c Compiler, path string, data []byte) ([]*engine.Rule, []error) {
	parsed, errs := parseFile(path, data)
	out := make([]*engine.Rule, 0, len(parsed))
	for _, p := range parsed {
		r, err := c.Compile(p.rule)
		if err != nil {
			errs = append(errs, p.tree.compileError(err))
			continue
		}
		out = append(out, r)
	}
	// In the order of the file, whichever step found them.
	slices.SortStableFunc(errs, func(a, b error) int {
		la, lb := errLine(a), errLine(b)
		return cmp.Or(cmp.Compare(la[0], lb[0]), cmp.Compare(la[1], lb[1]))
	})
	return out, errs
}

func errLine(err error) [2]int {
	if me, ok := errors.AsType[*manifest.Error](err); ok {
		return [2]int{me.Line, me.Column}
	}
	return [2]int{}
}

// compileError locates a compile error at the character of the expression it
// is about, or at the rule's document when the engine does not say.
func (t *tree) compileError(err error) error {
	if ce, ok := errors.AsType[*core.CompileError](err); ok && ce.Field != "" {
		n := t.find(ce.Field)
		line, col := t.at(n)
		if ce.Offset >= 0 {
			line, col = t.scalarPos(n, ce.Offset)
		}
		return &manifest.Error{Path: t.doc.Path, Line: line, Column: col, Err: err}
	}
	return t.errorAt(t.spec, err)
}

// LoadPaths compiles every rule in the files and directories named. A file
// reached twice is read once. Two rules with the same identity (the name, and
// the namespace of a PortalRule) are an error naming both places: the second
// is left out, since which of the two a user meant cannot be guessed.
//
// The files are parsed and compiled on GOMAXPROCS goroutines at once (c must
// allow that), and their rules and errors merged in the order of the paths:
// loading is the part of a `portal eval` run that no --jobs spreads.
func LoadPaths(c Compiler, paths []string) ([]*engine.Rule, []error) {
	// A file to load, or the error that stood in its place.
	type entry struct {
		file  string
		err   error
		rules []*engine.Rule
		errs  []error
	}
	var (
		entries []entry
		seen    = manifest.FileSet{}
	)
	for _, p := range paths {
		files, err := manifest.Files(p)
		if err != nil {
			entries = append(entries, entry{err: fmt.Errorf("rules %s: %w", p, err)})
			continue
		}
		for _, f := range files {
			if seen.First(f) {
				entries = append(entries, entry{file: f})
			}
		}
	}
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range entries {
		if e := &entries[i]; e.err == nil {
			g.Go(func() error {
				data, err := os.ReadFile(e.file)
				if err != nil {
					e.err = fmt.Errorf("read %s: %w", e.file, err)
					return nil
				}
				e.rules, e.errs = CompileFile(c, e.file, data)
				return nil
			})
		}
	}
	_ = g.Wait() // each file's errors are in its entry
	var (
		rules []*engine.Rule
		errs  []error
		names = map[string]core.Source{}
	)
	for _, e := range entries {
		if e.err != nil {
			errs = append(errs, e.err)
			continue
		}
		errs = append(errs, e.errs...)
		for _, r := range e.rules {
			if err := checkUnique(names, r.Rule); err != nil {
				errs = append(errs, err)
				continue
			}
			rules = append(rules, r)
		}
	}
	return rules, errs
}

// checkUnique records r's identity in names, or says where the same identity
// was defined before. A PortalRule may share its name with a cluster-wide rule
// or with a PortalRule of another namespace: each is its own object.
func checkUnique(names map[string]core.Source, r *core.Rule) error {
	id := r.Name
	what := fmt.Sprintf("rule %q", r.Name)
	if r.Namespace != "" {
		id = r.Namespace + "/" + r.Name
		what = fmt.Sprintf("PortalRule %s/%s", r.Namespace, r.Name)
	}
	if first, ok := names[id]; ok {
		return &manifest.Error{Path: r.Source.Path, Line: r.Source.Line, Err: fmt.Errorf(
			"%s is already defined at %s: rename one of them (names identify rules in reports and status)", what, first)}
	}
	names[id] = r.Source
	return nil
}
