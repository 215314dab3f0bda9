// Package flagalias keeps renamed command-line flags working under their old
// names. It is its own package because both the composition root and the
// layers in internal/manager own flags that were renamed.
package flagalias

import (
	"fmt"

	"github.com/spf13/pflag"
)

// Deprecated keeps old working as another name of the flag name: it sets
// the same value, is hidden from --help, and using it prints
// "Flag --OLD has been deprecated, use --NAME instead" on standard error, so
// scripts and manifests written for an older Portal keep running while they
// are moved to the new name.
func Deprecated(f *pflag.FlagSet, old, name string) {
	nf := f.Lookup(name)
	if nf == nil {
		panic(fmt.Sprintf("flagalias: no flag --%s", name)) // a programming error, caught by every test that builds a command
	}
	f.AddFlag(&pflag.Flag{Name: old, Usage: nf.Usage, Value: nf.Value, DefValue: nf.DefValue, NoOptDefVal: nf.NoOptDefVal})
	if err := f.MarkDeprecated(old, fmt.Sprintf("use --%s instead", name)); err != nil {
		panic(err)
	}
}
