package main

import (
	"fmt"

	"github.com/spf13/pflag"
)

// deprecatedAlias keeps old working as another name of the flag name: it sets
// the same value, is hidden from --help, and using it prints
// "Flag --OLD has been deprecated, use --NAME instead" on standard error, so
// scripts and manifests written for an older Portal keep running while they
// are moved to the new name.
func deprecatedAlias(f *pflag.FlagSet, old, name string) {
	nf := f.Lookup(name)
	if nf == nil {
		panic(fmt.Sprintf("deprecatedAlias: no flag --%s", name)) // a programming error, caught by every test that builds a command
	}
	f.AddFlag(&pflag.Flag{Name: old, Usage: nf.Usage, Value: nf.Value, DefValue: nf.DefValue, NoOptDefVal: nf.NoOptDefVal})
	if err := f.MarkDeprecated(old, fmt.Sprintf("use --%s instead", name)); err != nil {
		panic(err)
	}
}
