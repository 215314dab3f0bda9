package imagebuild

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestBuildRefusesIncompleteOptions(t *testing.T) {
	_, err := Build(Options{Binary: []byte("x"), Name: "a/b"})
	if err == nil {
		t.Fatal("Build with a slash in the name, no arch and no time succeeded")
	}
	for _, want := range []string{`name "a/b"`, "architecture", "creation time is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// Another binary (a pause program, say) gets its own name, arguments and
// user, and the archive loads back with them.
func TestBuildOtherBinary(t *testing.T) {
	img, err := Build(Options{
		Binary: []byte("pause"), Name: "pause", Cmd: []string{"-v"}, Arch: "arm64",
		Created: time.Unix(1, 0), UID: 1000, GID: 2000,
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out", "pause.tar")
	if err := WriteTarball(img, path, "pause:test"); err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Config.User; got != "1000:2000" {
		t.Errorf("user %q, want 1000:2000", got)
	}
	if got := strings.Join(append(cfg.Config.Entrypoint, cfg.Config.Cmd...), " "); got != "/pause -v" {
		t.Errorf("command %q, want /pause -v", got)
	}
	if cfg.Architecture != "arm64" || cfg.OS != "linux" {
		t.Errorf("platform %s/%s, want linux/arm64", cfg.OS, cfg.Architecture)
	}
	if err := WriteTarball(img, path, "Not A Tag!"); err == nil {
		t.Error("WriteTarball accepted an invalid tag")
	}
}
