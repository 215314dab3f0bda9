// Package chart installs Portal's Helm chart (deploy/helm/portal) from
// Portal's image on the real node of internal/devcluster and checks what a
// platform team relies on: replicas, admission through the Service, warn
// and dryrun rules, leader election, the failure policy with every replica
// gone, and an uninstall that leaves nothing behind.
//
// The node needs root and `make tools` (see
// docs/contributing/testing-approach.md). The image is built from this
// checkout with internal/imagebuild, as `make image` builds it; set
// PORTAL_E2E_IMAGE to an archive (`make image`'s bin/image/portal.tar) to
// test that one instead.
package chart

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

const (
	releaseName = "portal"
	releaseNS   = "portal-system"
)

// image is the repository:tag the chart runs, set by the shared setup.
var image = "portal.test/portal:e2e"

var shared = devtest.Shared{
	Options: devcluster.Options{Node: true, CRDDirectoryPaths: []string{}},
	Setup: func(cl *devcluster.Cluster) (func() error, error) {
		return func() error { return nil }, importPortalImage(cl)
	},
}

func TestMain(m *testing.M) { shared.Main(m) }

// importPortalImage puts Portal's image into the node's containerd.
func importPortalImage(cl *devcluster.Cluster) error {
	ctx := context.Background()
	archive := os.Getenv("PORTAL_E2E_IMAGE")
	if archive == "" {
		return cl.BuildImage(ctx, "./cmd/portal", image)
	}
	// make image tags the archive portal:<version>.
	out, err := exec.Command("tar", "-xOf", archive, "manifest.json").Output()
	if err != nil {
		return fmt.Errorf("PORTAL_E2E_IMAGE: read manifest.json of %s: %w", archive, err)
	}
	var manifest []struct{ RepoTags []string }
	if err := json.Unmarshal(out, &manifest); err != nil || len(manifest) == 0 || len(manifest[0].RepoTags) == 0 {
		return fmt.Errorf("PORTAL_E2E_IMAGE: %s names no image tag (err %v)", archive, err)
	}
	image = manifest[0].RepoTags[0]
	return cl.ImportImage(ctx, archive)
}

// imageValues are the chart values that run image from the node's store.
func imageValues() []string {
	i := strings.LastIndex(image, ":")
	return []string{"image.repository=" + image[:i], "image.tag=" + image[i+1:], "image.pullPolicy=Never"}
}

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary is bin/helm, built from hack/tools/helm (as `make tools`
// does) when missing.
func helmBinary(t testing.TB) string {
	t.Helper()
	helmOnce.Do(func() {
		root, err := devcluster.RepoRoot()
		if err != nil {
			helmErr = err
			return
		}
		helmPath = filepath.Join(root, "bin", "helm")
		if _, err := os.Stat(helmPath); err == nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", helmPath, "helm.sh/helm/v4/cmd/helm")
		cmd.Dir = filepath.Join(root, "hack", "tools", "helm")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = errors.New("build bin/helm from hack/tools/helm: " + err.Error() + "\n" + string(out))
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}
