// Package testbin finds the tools tests run as real processes in the
// repository's bin/ (where `make tools` builds them), building one from its
// hack/tools module when it is missing, so a test never skips for want of a
// binary.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"github.com/vilaca/portal/internal/devcluster"
)

// Binary is a tool built from a main package of a module under hack/tools
// into bin/. Declare one per tool as a package variable: it builds at most
// once per test process.
type Binary struct {
	name, module, pkg string

	once sync.Once
	path string
	err  error
}

// New describes bin/<name>, built from pkg in hack/tools/<module>.
func New(name, module, pkg string) *Binary {
	return &Binary{name: name, module: module, pkg: pkg}
}

// Path returns the binary's path, building it first when it is missing.
func (b *Binary) Path() (string, error) {
	b.once.Do(func() { b.path, b.err = b.find() })
	return b.path, b.err
}

func (b *Binary) find() (string, error) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "bin", b.name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// Build beside the target and rename, so test binaries of other
	// packages building at the same time never run a partial file.
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, b.pkg)
	cmd.Dir = filepath.Join(root, "hack", "tools", b.module)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", b.name, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("build %s: %w", b.name, err)
	}
	return bin, nil
}
