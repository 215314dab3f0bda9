//go:build !linux

package devcluster

import (
	"errors"
	"os/exec"
)

// The node (portal dev --node) runs only on Linux; these keep the package,
// and with it portal dev without a node, building elsewhere (macOS).

func dieWithParent(*exec.Cmd) {}

func unmountDetached(string) error { return errors.ErrUnsupported }
