//go:build portal_nodev

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// NoDevTag is the build tag that leaves `portal dev` out of the binary.
//
// `portal dev` links controller-runtime's envtest, whose internal port
// allocator creates $XDG_CACHE_HOME/kubebuilder-envtest (or the same under
// $TMPDIR) in a package init and panics when it cannot. The container image
// and the dev node's images are built with this tag, so the webhook and the
// waf-proxy data plane start on a read-only root filesystem without a
// writable /tmp or home directory.
const NoDevTag = "portal_nodev"

func newDevCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "dev",
		Short:  "Not in this build: run a local control plane with Portal (build without -tags " + NoDevTag + ")",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("portal dev is not in this binary: it was built with -tags " + NoDevTag +
				" (as the container image is); use a binary from `make build` or `go install ./cmd/portal`")
		},
		DisableFlagParsing: true,
	}
}
