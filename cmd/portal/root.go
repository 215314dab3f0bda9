package main

import (
	"github.com/spf13/cobra"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "portal",
		Short: "Portal: the Kubernetes security control plane",
		Long: `Portal guards a Kubernetes cluster with rules written in expr-lang: at admission,
in continuous audit, and offline in CI with 'portal eval'.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(newVersionCommand(), newEvalCommand(), newRunCommand(), newDevCommand(), newTestCommand(), newMigrateCommand(), newWAFProxyCommand(), newUninstallCommand())
	return root
}
