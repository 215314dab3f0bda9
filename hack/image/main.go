// Command image packs the static portal binary into an OCI image without a
// container runtime or a network: an empty base, one layer holding /portal,
// user 65532, no shell. Everything that goes into the image comes from the
// flags and the binary's bytes (never the clock or file times), so the same
// source gives the same digest. `make image` runs it; see
// docs/security/supply-chain.md.
//
// Output in -out: oci/ (an OCI image layout), portal.tar (for docker load
// or podman load) and digest (the manifest digest).
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonRoot is the uid and gid Portal runs as: "nonroot" in distroless, what
// the chart's securityContext sets too.
const nonRoot = 65532

// options say what goes into the image.
type options struct {
	Binary   string
	Out      string
	Repo     string
	Version  string
	Revision string
	Source   string
	Arch     string
	// Created is the image's creation time and every file's time: the
	// commit time (SOURCE_DATE_EPOCH), never the clock.
	Created time.Time
}

func main() {
	var o options
	var epoch string
	flag.StringVar(&o.Binary, "binary", "", "the static portal binary to pack")
	flag.StringVar(&o.Out, "out", "", "output directory (replaced)")
	flag.StringVar(&o.Repo, "repo", "portal", "repository name of the image in portal.tar and the layout")
	flag.StringVar(&o.Version, "version", "dev", "image tag and org.opencontainers.image.version")
	flag.StringVar(&o.Revision, "revision", "", "source revision, org.opencontainers.image.revision")
	flag.StringVar(&o.Source, "source", "https://github.com/vilaca/portal", "org.opencontainers.image.source")
	flag.StringVar(&o.Arch, "arch", "amd64", "architecture the binary was built for (GOARCH)")
	flag.StringVar(&epoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "creation time in seconds since the epoch (default $SOURCE_DATE_EPOCH)")
	flag.Parse()
	if err := run(o, epoch); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o options, epoch string) error {
	if o.Binary == "" || o.Out == "" {
		return errors.New("-binary and -out are required")
	}
	if epoch == "" {
		return errors.New("set -source-date-epoch or SOURCE_DATE_EPOCH (the commit time: git log -1 --format=%ct): the clock would make every build differ")
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || sec < 0 {
		return fmt.Errorf("source date epoch %q: want whole seconds since 1970", epoch)
	}
	o.Created = time.Unix(sec, 0).UTC()
	img, err := build(o)
	if err != nil {
		return err
	}
	digest, err := write(img, o)
	if err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}

// build returns the image of o.Binary.
func build(o options) (v1.Image, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	layerTar, err := layerTar(bin, o.Created)
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
		History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "hack/image: /portal", Comment: "static portal binary"},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: o.Created}
	cfg.OS, cfg.Architecture = "linux", o.Arch
	labels := ociLabels(o)
	cfg.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonRoot, nonRoot),
		Entrypoint: []string{"/portal"},
		WorkingDir: "/",
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

func ociLabels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "portal",
		"org.opencontainers.image.description": "Portal, the Kubernetes security control plane",
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	return l
}

// layerTar is the only layer: /portal, owned by root and not writable, so
// the uid the container runs as cannot replace it. No shell, no other file.
func layerTar(bin []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     "portal",
		Mode:     0o555,
		Size:     int64(len(bin)),
		ModTime:  mtime,
		Format:   tar.FormatPAX,
	}
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

// write replaces o.Out with the layout, the tarball and the digest file, and
// returns the manifest digest.
func write(img v1.Image, o options) (string, error) {
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return "", err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return "", err
	}
	ref, err := name.NewTag(o.Repo+":"+o.Version, name.WeakValidation)
	if err != nil {
		return "", fmt.Errorf("image name %s:%s: %w", o.Repo, o.Version, err)
	}
	p, err := layout.Write(filepath.Join(o.Out, "oci"), empty.Index)
	if err != nil {
		return "", err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.Version})); err != nil {
		return "", err
	}
	if err := tarball.WriteToFile(filepath.Join(o.Out, "portal.tar"), ref, img); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "digest"), []byte(digest.String()+"\n"), 0o644); err != nil {
		return "", err
	}
	return digest.String(), nil
}
