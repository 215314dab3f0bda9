package ruletest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vilaca/portal/internal/manifest"
)

// Bounds on what a test file names: a test file and everything it names is
// pull-request input, so each file the run reads is checked before a loader
// sees it.
const (
	// MaxInputBytes bounds each file a test reads besides itself: a rule
	// file, a manifest, an exception, cluster state or an audit log.
	MaxInputBytes = 16 << 20
	// MaxPathBytes bounds the length of one path in a test file.
	MaxPathBytes = 4096
)

// confine keeps what a test reads under its root: the directory `portal
// test` was given (or the directory of a test file named on its own), so a
// pull request cannot make CI read, evaluate and print files elsewhere on
// the runner.
type confine struct {
	// root is the root after links, absolute; shown is the root as given,
	// for messages.
	root, shown string
	// dir is the test file's directory: its paths are relative to it.
	dir string
}

func newConfine(root, testPath string) (*confine, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", root, err)
	}
	return &confine{root: real, shown: root, dir: filepath.Dir(testPath)}, nil
}

// within says whether p, after links, is the root or under it.
func (c *confine) within(p string) (string, error) {
	// Says what is missing by the path the test file wrote.
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(c.root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s resolves outside %s, the directory portal test was given: a test reads only files under it", p, c.shown)
	}
	return real, nil
}

// regular checks that p, after links, is a regular file under the root of
// at most MaxInputBytes: a device (/dev/zero), a pipe or a huge file would
// exhaust the runner before any loader could bound it.
func (c *confine) regular(p string, limit int64) error {
	info, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s): a test reads only regular files", p, info.Mode().Type())
	}
	if info.Size() > limit {
		return fmt.Errorf("%s is %d bytes, over the %d a file a test reads may have", p, info.Size(), limit)
	}
	_, err = c.within(p)
	return err
}

// files lists the files the path p of the test file names, as the loaders
// would read them (manifest.Files), each checked: p and every file under
// it resolve under the root, and each is a bounded regular file.
func (c *confine) files(p string) ([]string, error) {
	full := filepath.Join(c.dir, p)
	info, err := os.Stat(full)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		if err := c.regular(full, MaxInputBytes); err != nil {
			return nil, err
		}
		return []string{full}, nil
	}
	if _, err := c.within(full); err != nil {
		return nil, err
	}
	list, err := manifest.Files(full)
	if err != nil {
		return nil, err
	}
	for _, f := range list {
		if err := c.regular(f, MaxInputBytes); err != nil {
			return nil, err
		}
	}
	return list, nil
}

// all lists the checked files of every path in ps.
func (c *confine) all(ps []string) ([]string, error) {
	var out []string
	for _, p := range ps {
		fs, err := c.files(p)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	return out, nil
}

// readBounded reads the test file at path: a regular file under the root
// of at most MaxFileBytes, read through a limit so that a file that grows
// or lies about its size still cannot exhaust memory.
func (c *confine) readBounded(path string) ([]byte, error) {
	if err := c.regular(path, MaxFileBytes); err != nil {
		return nil, &manifest.Error{Path: path, Err: err}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, &manifest.Error{Path: path, Err: errors.New(tooBig(int64(len(data))))}
	}
	return data, nil
}

func tooBig(n int64) string {
	return fmt.Sprintf("the file is %d bytes, over the %d a test file may have", n, MaxFileBytes)
}
