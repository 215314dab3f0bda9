package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of portal",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			goVersion := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				goVersion = bi.GoVersion
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "portal %s (%s)\n", version, goVersion)
			return err
		},
	}
}
