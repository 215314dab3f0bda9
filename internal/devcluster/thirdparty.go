package devcluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// CRDSet is a set of third-party CustomResourceDefinitions that Portal's
// layers read or write, taken from the Go module that publishes them at the
// version go.mod pins, so the tests and `portal dev` run against exactly the
// schemas the code compiles against (ARCHITECTURE.md section 5).
type CRDSet string

const (
	// GatewayAPIStandard is the standard channel of sigs.k8s.io/gateway-api.
	GatewayAPIStandard CRDSet = "gateway-api-standard"
	// GatewayAPIExperimental is the experimental channel: the standard
	// kinds with their experimental fields, plus the experimental kinds.
	// Use it instead of GatewayAPIStandard, never with it.
	GatewayAPIExperimental CRDSet = "gateway-api-experimental"
	// Istio is every istio.io CRD (networking, security, extensions, ...).
	Istio CRDSet = "istio"
	// OpenReports is openreports.io Report and ClusterReport.
	OpenReports CRDSet = "openreports"
)

// crdSources says where each set lives inside its module.
var crdSources = map[CRDSet]struct{ module, path string }{
	GatewayAPIStandard:     {"sigs.k8s.io/gateway-api", "config/crd/standard"},
	GatewayAPIExperimental: {"sigs.k8s.io/gateway-api", "config/crd/experimental"},
	Istio:                  {"istio.io/api", "kubernetes/customresourcedefinitions.gen.yaml"},
	OpenReports:            {"github.com/openreports/reports-api", "config/crd"},
}

// ThirdPartyCRDPaths returns the files or directories holding the given
// sets, for Options.CRDDirectoryPaths. It asks the go command where the
// modules are, so it works in a checkout of Portal with Go installed (the
// tests, `make run`); elsewhere it says so.
func ThirdPartyCRDPaths(sets ...CRDSet) ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, fmt.Errorf("third-party CRDs are read from Go modules, which needs a checkout of Portal: %w", err)
	}
	dirs := map[string]string{}
	paths := make([]string, 0, len(sets))
	for _, s := range sets {
		src, ok := crdSources[s]
		if !ok {
			return nil, fmt.Errorf("unknown CRD set %q", s)
		}
		dir, ok := dirs[src.module]
		if !ok {
			cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", src.module)
			cmd.Dir = root
			out, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("locate module %s (for the %s CRDs): %w", src.module, s, err)
			}
			dir = strings.TrimSpace(string(out))
			if dir == "" {
				return nil, fmt.Errorf("locate module %s (for the %s CRDs): not downloaded; run go mod download", src.module, s)
			}
			dirs[src.module] = dir
		}
		paths = append(paths, filepath.Join(dir, filepath.FromSlash(src.path)))
	}
	return paths, nil
}
