package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func testOptions(t *testing.T, bin []byte) options {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "portal")
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return options{
		Binary: p, Out: filepath.Join(dir, "out"), Repo: "portal", Version: "v0.0.1-test",
		Revision: "0123456789abcdef", Source: "https://github.com/vilaca/portal", Arch: "amd64",
		Created: time.Unix(1700000000, 0).UTC(),
	}
}

func buildDigest(t *testing.T, o options) string {
	t.Helper()
	d, err := build(o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Two builds of the same bytes give the same digest, even when the binary's
// file time and the wall clock differ between them.
func TestBuildIsReproducible(t *testing.T) {
	bin := []byte("\x7fELF not really a binary, the builder only copies it")
	a, b := testOptions(t, bin), testOptions(t, bin)
	if err := os.Chtimes(b.Binary, time.Unix(1, 0), time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if da, db := buildDigest(t, a), buildDigest(t, b); da != db {
		t.Errorf("same binary, different digests: %s and %s", da, db)
	}
	c := testOptions(t, append(bin, '!'))
	if dc := buildDigest(t, c); dc == buildDigest(t, a) {
		t.Error("a different binary gave the same digest")
	}
	d := testOptions(t, bin)
	d.Created = d.Created.Add(time.Second)
	if dd := buildDigest(t, d); dd == buildDigest(t, a) {
		t.Error("a different SOURCE_DATE_EPOCH gave the same digest: the time is not in the image")
	}
}

// The image runs as 65532 with labels that say where it comes from, and its
// only file is /portal: no shell, nothing writable by that user.
func TestImageContent(t *testing.T) {
	o := testOptions(t, []byte("portal binary"))
	digest := buildDigest(t, o)

	p, err := layout.FromPath(filepath.Join(o.Out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest.String() != digest {
		t.Fatalf("layout index %+v, want one manifest %s", m.Manifests, digest)
	}
	img, err := tarball.ImageFromPath(filepath.Join(o.Out, "portal.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cfg.Config.User)
	}
	if got := strings.Join(cfg.Config.Entrypoint, " "); got != "/portal" {
		t.Errorf("entrypoint %q, want /portal", got)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var files []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, h.Name)
		if h.Name == "portal" && (h.Mode&0o222 != 0 || h.Uid != 0) {
			t.Errorf("/portal mode %o uid %d: the runtime user could replace it", h.Mode, h.Uid)
		}
	}
	if strings.Join(files, ",") != "portal" {
		t.Errorf("layer files %v, want only portal (no shell, no base image)", files)
	}
}

func TestRunRefusesTheClock(t *testing.T) {
	o := testOptions(t, []byte("x"))
	err := run(o, "")
	if err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("run without an epoch: %v, want an error naming SOURCE_DATE_EPOCH", err)
	}
	if err := run(o, "yesterday"); err == nil {
		t.Error("run with epoch \"yesterday\" succeeded")
	}
}
