package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/vilaca/portal/internal/imagebuild"
)

// The images every node has: the sandbox image containerd uses for each pod
// and the demo workload (images/hello: "hello from <pod name>" on :8080).
// Both are built from source in this repository when the node starts.
const (
	PauseImage = "portal.test/pause:v1"
	HelloImage = "portal.test/hello:v1"
)

// ImageBuildTags are the build tags of every image binary, as of `make
// image`: portal_nodev leaves `portal dev` (and with it envtest, whose init
// creates a directory under $HOME or $TMPDIR) out, so the images run on a
// read-only root filesystem.
const ImageBuildTags = "portal_nodev"

var nodeImages = map[string]string{
	PauseImage: "./internal/devcluster/images/pause",
	HelloImage: "./internal/devcluster/images/hello",
}

// BuildImage builds the main package goPackage (a path relative to the
// repository root, e.g. "./internal/devcluster/images/hello") as a static
// binary, packs it into an image tagged ref (imagebuild: empty base, one
// layer, uid 65532) and imports it into the node's containerd. Pods run it
// with imagePullPolicy Never (or IfNotPresent and a tag other than latest).
func (c *Cluster) BuildImage(ctx context.Context, goPackage, ref string) error {
	if c.node == nil {
		return errNoNode
	}
	return c.node.buildImage(ctx, goPackage, ref)
}

// ImportImage imports an image archive (`docker save` / OCI tarball, e.g.
// `make image`'s bin/image/portal.tar) into the node's containerd.
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	if c.node == nil {
		return errNoNode
	}
	return c.node.importImage(ctx, tarball)
}

func (n *node) buildImage(ctx context.Context, goPackage, ref string) error {
	root, err := RepoRoot()
	if err != nil {
		return fmt.Errorf("devcluster: building image %s from %s needs the source checkout: %w", ref, goPackage, err)
	}
	dir := filepath.Join(n.dir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := strings.NewReplacer("/", "_", ":", "_").Replace(ref)
	bin := filepath.Join(dir, base)
	build := exec.CommandContext(ctx, "go", "build", "-tags", ImageBuildTags, "-trimpath", "-ldflags", "-s -w", "-o", bin, goPackage)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("devcluster: go build %s: %w\n%s", goPackage, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	img, err := imagebuild.Build(imagebuild.Options{
		Binary: data, Name: filepath.Base(goPackage), Arch: runtime.GOARCH,
		// A fixed time: the image is rebuilt on every start and only its
		// content matters.
		Created: time.Unix(0, 0),
	})
	if err != nil {
		return err
	}
	tarball := bin + ".tar"
	if err := imagebuild.WriteTarball(img, tarball, ref); err != nil {
		return err
	}
	return n.importImage(ctx, tarball)
}

func (n *node) importImage(ctx context.Context, tarball string) error {
	cmd := exec.CommandContext(ctx, "ctr", "--address", n.containerdSocket(), "--namespace", "k8s.io", "images", "import", "--all-platforms", tarball)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("devcluster: ctr images import %s: %w\n%s", tarball, err, out.String())
	}
	return nil
}
