package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

// versionInfo is what `portal version` prints; its JSON form is a stable
// interface for scripts and bug reports.
type versionInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// readVersionInfo takes the commit from the build information the Go
// toolchain stamps into binaries built inside a git checkout; a build outside
// one (go install from a module, -buildvcs=false) has none and says so.
func readVersionInfo() versionInfo {
	v := versionInfo{
		Version:   version,
		Commit:    "unknown",
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	if v.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v.Version = bi.Main.Version
	}
	return v
}

func newVersionCommand() *cobra.Command {
	output := ""
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print portal's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := readVersionInfo()
			switch output {
			case "":
				commit := v.Commit
				if v.Modified {
					commit += " (modified)"
				}
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "portal %s\ncommit: %s\ngo: %s %s\n", v.Version, commit, v.GoVersion, v.Platform)
				return err
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			default:
				return usageError(fmt.Errorf("--output %q: use json, or leave it out for text", output))
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json for machine-readable output")
	return cmd
}
