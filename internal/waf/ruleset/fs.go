package ruleset

import (
	"context"
	"io/fs"
	"strings"
	"testing/fstest"

	coreruleset "github.com/corazawaf/coraza-coreruleset/v4"
)

// crsFS is the OWASP Core Rule Set embedded in Portal: @coraza.conf-recommended,
// @crs-setup.conf.example and @owasp_crs/ (rules and their .data files).
var crsFS = coreruleset.FS

// CRS returns the embedded OWASP Core Rule Set as a filesystem.
func CRS() fs.FS { return crsFS }

// rulesFile is the name of a bundle's rules inside its sandbox directory.
const rulesFile = "rules.conf"

// sandboxFS is the only filesystem a compile sees. It holds:
//
//   - the embedded Core Rule Set, under any path whose first element starting
//     with "@" names it ("@owasp_crs/x.conf", "dir/@crs-setup.conf.example");
//   - the bundle's data files, at the root and in the bundle directory;
//   - the bundle's rules, as <dir>/rules.conf (which includes <dir>/part-N.conf
//     when the rules are large; see chunk).
//
// The bundle directory is named after a digest of the data files. Coraza
// memoizes @pmFromFile matchers by directory and file name across WAF
// instances, so the digest keeps two bundles whose files share a name but not
// their content from sharing a matcher.
//
// Nothing else exists: absolute paths, "..", and every host file are "not
// found".
//
// Every access fails once ctx ends: Coraza reads a file for each Include and
// each file operator, so that is where a compile past its deadline stops.
type sandboxFS struct {
	ctx context.Context
	mem fstest.MapFS
	crs fs.FS
}

func newSandboxFS(ctx context.Context, dir string, rules map[string]string, files map[string][]byte) *sandboxFS {
	mem := fstest.MapFS{}
	for name, text := range rules {
		mem[dir+"/"+name] = &fstest.MapFile{Data: []byte(text), Mode: 0o444}
	}
	for name, data := range files {
		f := &fstest.MapFile{Data: data, Mode: 0o444}
		mem[name] = f
		mem[dir+"/"+name] = f
	}
	return &sandboxFS{ctx: ctx, mem: mem, crs: crsFS}
}

// crsPath returns the Core Rule Set path inside name, if name has one.
func crsPath(name string) (string, bool) {
	if !fs.ValidPath(name) {
		return "", false
	}
	i := strings.Index(name, "@")
	if i < 0 || (i > 0 && name[i-1] != '/') {
		return "", false
	}
	return name[i:], true
}

func notFound(op, name string) error {
	return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

// Open implements fs.FS.
func (s *sandboxFS) Open(name string) (fs.File, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if !fs.ValidPath(name) {
		return nil, notFound("open", name)
	}
	if p, ok := crsPath(name); ok {
		return s.crs.Open(p)
	}
	return s.mem.Open(name)
}

// ReadFile implements fs.ReadFileFS.
func (s *sandboxFS) ReadFile(name string) ([]byte, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if !fs.ValidPath(name) {
		return nil, notFound("read", name)
	}
	if p, ok := crsPath(name); ok {
		return fs.ReadFile(s.crs, p)
	}
	return fs.ReadFile(s.mem, name)
}

// ReadDir implements fs.ReadDirFS.
func (s *sandboxFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	if !fs.ValidPath(name) {
		return nil, notFound("readdir", name)
	}
	if p, ok := crsPath(name); ok {
		return fs.ReadDir(s.crs, p)
	}
	return fs.ReadDir(s.mem, name)
}
