// Package imagebuild packs one static binary into an OCI image without a
// container runtime or a network: an empty base, one layer holding the
// binary at the root, a non-root user, no shell. Everything in the image
// comes from the options and the binary's bytes (never the clock or file
// times), so the same inputs give the same digest. `make image` (hack/image)
// builds Portal's image with it; tests that run images on a real node can
// build theirs the same way.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the uid and gid images run as by default: "nonroot" in
// distroless, and what Portal's chart sets in its securityContext.
const NonRoot = 65532

// Options say what goes into the image.
type Options struct {
	// Binary is the static executable. Required.
	Binary []byte
	// Name is its file name at the root of the image and the entrypoint
	// /Name. Required; no slashes.
	Name string
	// Cmd is the default arguments.
	Cmd []string
	// Arch is the GOARCH the binary was built for. Required.
	Arch string
	// Created is the image's creation time and the file's time: pass the
	// commit time (SOURCE_DATE_EPOCH), never the clock. Required.
	Created time.Time
	// Labels go into the image config and the manifest annotations.
	Labels map[string]string
	// UID and GID the container runs as; 0 means NonRoot.
	UID, GID int
}

// Build returns the image.
func Build(o Options) (v1.Image, error) {
	var errs []error
	if len(o.Binary) == 0 {
		errs = append(errs, errors.New("the binary is empty"))
	}
	if o.Name == "" || strings.Contains(o.Name, "/") {
		errs = append(errs, fmt.Errorf("name %q: want a file name without slashes", o.Name))
	}
	if o.Arch == "" {
		errs = append(errs, errors.New("the architecture is required"))
	}
	if o.Created.IsZero() {
		errs = append(errs, errors.New("the creation time is required: use the commit time, the clock would make every build differ"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	uid, gid := o.UID, o.GID
	if uid == 0 {
		uid = NonRoot
	}
	if gid == 0 {
		gid = NonRoot
	}
	created := o.Created.UTC()
	layerTar, err := layerTar(o.Name, o.Binary, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "imagebuild: /" + o.Name},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: created}
	cfg.OS, cfg.Architecture = "linux", o.Arch
	cfg.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", uid, gid),
		Entrypoint: []string{"/" + o.Name},
		Cmd:        o.Cmd,
		WorkingDir: "/",
		Labels:     o.Labels,
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	if len(o.Labels) == 0 {
		return img, nil
	}
	return mutate.Annotations(img, o.Labels).(v1.Image), nil
}

// layerTar is the only layer: the binary, owned by root and not writable,
// so the user the container runs as cannot replace it. No other file.
func layerTar(name string, bin []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o555, Size: int64(len(bin)), ModTime: mtime, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLayout writes img as the only image of a new OCI image layout in
// dir (replaced), its index entry annotated with refName.
func WriteLayout(img v1.Image, dir, refName string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": refName}))
}

// WriteTarball writes img as a `docker load` / `ctr images import` archive
// tagged tag (repository:tag).
func WriteTarball(img v1.Image, path, tag string) error {
	ref, err := name.NewTag(tag, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("image tag %q: %w", tag, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return tarball.WriteToFile(path, ref, img)
}
