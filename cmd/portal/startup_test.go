package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/devcluster"
)

// buildImageBinary builds cmd/portal with the build tags of the container
// image and the dev node's images.
func buildImageBinary(t *testing.T) string {
	t.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "portal")
	build := exec.Command("go", "build", "-tags", devcluster.ImageBuildTags, "-o", bin, "./cmd/portal")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runIn runs bin with HOME and TMPDIR set to home and tmp and no
// XDG_CACHE_HOME: the places a library would put a cache.
func runIn(t *testing.T, bin, home, tmp string, args ...string) (string, error) {
	t.Helper()
	// A bound, not an assertion: a binary that hangs fails here, not at the
	// test binary's timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "HOME" && k != "TMPDIR" && k != "XDG_CACHE_HOME" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+home, "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestImageBinaryWritesNothingAtStart: the webhook and the waf-proxy data
// plane run on a read-only root filesystem. The image binary must start
// without creating anything in its home or temporary directory, and start
// when neither can be written (a pod without a /tmp emptyDir), which it
// did not while it linked envtest: its init created
// $HOME/.cache/kubebuilder-envtest, else $TMPDIR/kubebuilder-envtest, and
// panicked with "mkdir /tmp: read-only file system".
func TestImageBinaryWritesNothingAtStart(t *testing.T) {
	bin := buildImageBinary(t)
	commands := [][]string{{"version"}, {"waf-proxy", "--help"}, {"run", "--help"}}

	home, tmp := t.TempDir(), t.TempDir()
	for _, args := range commands {
		if out, err := runIn(t, bin, home, tmp, args...); err != nil {
			t.Errorf("portal %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, dir := range []string{home, tmp} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			t.Errorf("portal created %s at start", filepath.Join(dir, e.Name()))
		}
	}

	// Beneath a regular file nothing can be created, even by root (who
	// ignores a directory's mode bits).
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o400); err != nil {
		t.Fatal(err)
	}
	unwritable := filepath.Join(file, "dir")
	for _, args := range commands {
		if out, err := runIn(t, bin, unwritable, unwritable, args...); err != nil {
			t.Errorf("portal %s with no writable home or temporary directory: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// Without the dev harness, `portal dev` says why and what to use. (The
	// unknown flag keeps a binary that has it from starting a cluster.)
	out, err := runIn(t, bin, home, tmp, "dev", "--no-such-flag")
	if err == nil || !strings.Contains(out, "-tags "+devcluster.ImageBuildTags) || !strings.Contains(out, "make build") {
		t.Errorf("portal dev in the image binary: %v\n%s", err, out)
	}
}

// TestImageBuildsLeaveOutDev: `make image` builds with the same tags as
// the dev node's images and the test above.
func TestImageBuildsLeaveOutDev(t *testing.T) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	_, rule, ok := strings.Cut(string(mk), "\nimage:")
	if !ok {
		t.Fatal("no image rule in the Makefile")
	}
	rule, _, _ = strings.Cut(rule, "\n\n")
	if !strings.Contains(rule, "-tags "+devcluster.ImageBuildTags+" ") {
		t.Errorf("the Makefile's image rule does not build with -tags %s:\n%s", devcluster.ImageBuildTags, rule)
	}
}
