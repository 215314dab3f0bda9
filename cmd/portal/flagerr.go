package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/didyoumean"
)

// flagError adds to pflag's "unknown flag: --rulez" the flag meant and where
// the command's flags are listed: a misspelt flag is the most common first
// mistake, and pflag names only what it did not find.
func flagError(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	}
	name, _, _ = strings.Cut(name, "=")
	var names []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Deprecated == "" {
			names = append(names, f.Name)
		}
	})
	if s := didyoumean.Closest(name, names); s != "" {
		return fmt.Errorf("%w: did you mean --%s? (see %s --help)", err, s, cmd.CommandPath())
	}
	return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
}
