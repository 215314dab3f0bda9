//go:build !portal_nodev

package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vilaca/portal/deploy/crds"
	"github.com/vilaca/portal/examples"
	"github.com/vilaca/portal/internal/devcluster"
)

// devAssets says where `portal dev` reads its CRDs and demo files: the
// checkout it runs in, so edits to examples/ show at the next start, or,
// anywhere else, copies of the files built into the binary.
type devAssets struct {
	// root holds examples/ (rules/pod-security, manifests, waf).
	root string
	crds string
}

// resolveDevAssets finds the checkout above the working directory, or
// writes the built-in files under stateDir.
func resolveDevAssets(stateDir string) (devAssets, error) {
	if root, err := devcluster.RepoRoot(); err == nil {
		a := devAssets{root: root, crds: filepath.Join(root, "deploy", "crds")}
		if isDir(filepath.Join(root, "examples")) && isDir(a.crds) {
			return a, nil
		}
	}
	dir, err := filepath.Abs(filepath.Join(stateDir, "assets"))
	if err != nil {
		return devAssets{}, err
	}
	// Files of an older portal binary must not linger next to this one's.
	if err := os.RemoveAll(dir); err != nil {
		return devAssets{}, fmt.Errorf("portal dev: clear %s: %w", dir, err)
	}
	a := devAssets{root: dir, crds: filepath.Join(dir, "crds")}
	if err := extract(examples.FS, filepath.Join(dir, "examples")); err != nil {
		return devAssets{}, err
	}
	if err := extract(crds.FS, a.crds); err != nil {
		return devAssets{}, err
	}
	return a, nil
}

// path resolves a default path of the demo (examples/...) against the assets.
func (a devAssets) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(a.root, p)
}

func extract(fsys fs.FS, dir string) error {
	if err := os.CopyFS(dir, fsys); err != nil {
		return fmt.Errorf("portal dev: write built-in files to %s: %w", dir, err)
	}
	return nil
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
