package rule

import (
	"fmt"
	"os"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/manifest"
)

// Compiler compiles parsed rules; *engine.Engine is one.
type Compiler interface {
	Compile(r *core.Rule) (*engine.Rule, error)
}

// CompileFile parses and compiles the rules in one file. A rule that does not
// parse or compile is returned as an error located at its document and is
// left out; the rest load.
func CompileFile(c Compiler, path string, data []byte) ([]*engine.Rule, []error) {
	parsed, errs := ParseFile(path, data)
	out := make([]*engine.Rule, 0, len(parsed))
	for _, p := range parsed {
		r, err := c.Compile(p)
		if err != nil {
			errs = append(errs, &manifest.Error{Path: p.Source.Path, Line: p.Source.Line, Err: err})
			continue
		}
		out = append(out, r)
	}
	return out, errs
}

// LoadPaths compiles every rule in the files and directories named. A file
// reached twice is read once. Two rules with the same identity (the name, and
// the namespace of a PortalRule) are an error naming both places: the second
// is left out, since which of the two a user meant cannot be guessed.
func LoadPaths(c Compiler, paths []string) ([]*engine.Rule, []error) {
	var (
		rules []*engine.Rule
		errs  []error
		seen  = manifest.FileSet{}
		names = map[string]core.Source{}
	)
	for _, p := range paths {
		files, err := manifest.Files(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("rules %s: %w", p, err))
			continue
		}
		for _, f := range files {
			if !seen.First(f) {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				errs = append(errs, fmt.Errorf("read %s: %w", f, err))
				continue
			}
			rs, es := CompileFile(c, f, data)
			errs = append(errs, es...)
			for _, r := range rs {
				if err := checkUnique(names, r.Rule); err != nil {
					errs = append(errs, err)
					continue
				}
				rules = append(rules, r)
			}
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
