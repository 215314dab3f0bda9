// Command image packs the static portal binary into Portal's OCI image with
// internal/imagebuild: an empty base, /portal, user 65532, no shell, OCI
// labels, every time in it SOURCE_DATE_EPOCH. The same source gives the same
// digest. `make image` runs it; see docs/security/supply-chain.md.
//
// Output in -out (replaced): oci/ (an OCI image layout), portal.tar (for
// docker load, podman load or ctr images import) and digest (the manifest
// digest).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vilaca/portal/internal/imagebuild"
)

// options say what goes into the image.
type options struct {
	Binary   string
	Out      string
	Repo     string
	Version  string
	Revision string
	Source   string
	Arch     string
	Created  time.Time
}

func main() {
	var o options
	var epoch string
	flag.StringVar(&o.Binary, "binary", "", "the static portal binary to pack")
	flag.StringVar(&o.Out, "out", "", "output directory (replaced)")
	flag.StringVar(&o.Repo, "repo", "portal", "repository name of the image in portal.tar")
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
	digest, err := build(o)
	if err != nil {
		return err
	}
	fmt.Println(digest)
	return nil
}

// build writes the image of o.Binary into o.Out and returns its digest.
func build(o options) (string, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return "", err
	}
	img, err := imagebuild.Build(imagebuild.Options{
		Binary: bin, Name: "portal", Arch: o.Arch, Created: o.Created, Labels: ociLabels(o),
	})
	if err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return "", err
	}
	if err := imagebuild.WriteLayout(img, filepath.Join(o.Out, "oci"), o.Version); err != nil {
		return "", err
	}
	if err := imagebuild.WriteTarball(img, filepath.Join(o.Out, "portal.tar"), o.Repo+":"+o.Version); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "digest"), []byte(digest.String()+"\n"), 0o644); err != nil {
		return "", err
	}
	return digest.String(), nil
}

func ociLabels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "portal",
		"org.opencontainers.image.description": "Portal, the Kubernetes security control plane",
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
	}
	if o.Revision != "" {
		l["org.opencontainers.image.revision"] = o.Revision
	}
	return l
}
