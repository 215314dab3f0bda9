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

// LoadPaths compiles every rule in the files and directories named.
func LoadPaths(c Compiler, paths []string) ([]*engine.Rule, []error) {
	var (
		rules []*engine.Rule
		errs  []error
	)
	for _, p := range paths {
		files, err := manifest.Files(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("rules %s: %w", p, err))
			continue
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				errs = append(errs, fmt.Errorf("read %s: %w", f, err))
				continue
			}
			rs, es := CompileFile(c, f, data)
			rules = append(rules, rs...)
			errs = append(errs, es...)
		}
	}
	return rules, errs
}
