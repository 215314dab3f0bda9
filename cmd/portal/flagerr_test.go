package main

import (
	"fmt"
	"testing"
)

// A misspelt flag names the one meant and where the flags are listed; one
// that resembles none still says where to look.
func TestUnknownFlagSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--rulez", "r"}, "unknown flag: --rulez: did you mean --rules? (see portal eval --help)"},
		{[]string{"eval", "--fiel=m.yaml"}, "unknown flag: --fiel: did you mean --file? (see portal eval --help)"},
		{[]string{"test", "--outptu", "json"}, "unknown flag: --outptu: did you mean --output? (see portal test --help)"},
		{[]string{"eval", "--zzzzzzzz"}, "unknown flag: --zzzzzzzz (see portal eval --help)"},
		{[]string{"eval", "-z"}, "unknown shorthand flag: 'z' in -z (see portal eval --help)"},
	} {
		_, err := runCLI(t, "", c.args...)
		if got := fmt.Sprint(err); got != c.want || exitCodeOf(err) != exitUsage {
			t.Errorf("%v: exit %d, %q; want exit %d, %q", c.args, exitCodeOf(err), got, exitUsage, c.want)
		}
	}
}
