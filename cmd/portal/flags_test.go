package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestRenamedFlagsKeepWorking: manifests and scripts written with the old
// flag names keep running, with a warning that names the new one, and set
// the same value as the new name; --help shows only the new names.
func TestRenamedFlagsKeepWorking(t *testing.T) {
	for old, name := range map[string]string{
		"metrics-addr":      "metrics-bind-address",
		"health-addr":       "health-probe-bind-address",
		"cache-max-age":     "waf-cache-max-age",
		"cache-max-size":    "waf-cache-max-size",
		"cache-gc-interval": "waf-cache-gc-interval",
	} {
		value := map[string]string{"cache-max-age": "3h0m0s", "cache-max-size": "12345", "cache-gc-interval": "7m0s"}[old]
		if value == "" {
			value = "127.0.0.1:1234"
		}
		for _, flag := range []string{old, name} {
			cmd := newRunCommand()
			var stderr bytes.Buffer
			cmd.SetErr(&stderr)
			cmd.Flags().SetOutput(&stderr)
			if err := cmd.ParseFlags([]string{"--" + flag + "=" + value}); err != nil {
				t.Fatalf("--%s: %v", flag, err)
			}
			if got := cmd.Flags().Lookup(name).Value.String(); got != value {
				t.Errorf("--%s=%s: --%s is %q", flag, value, name, got)
			}
			warned := strings.Contains(stderr.String(), "use --"+name+" instead")
			if warned != (flag == old) {
				t.Errorf("--%s: deprecation warning %v, want %v (stderr %q)", flag, warned, flag == old, stderr.String())
			}
		}
		if u := newRunCommand().UsageString(); strings.Contains(u, "--"+old+" ") || !strings.Contains(u, "--"+name) {
			t.Errorf("--help shows --%s or hides --%s", old, name)
		}
	}
}

func TestWAFProxyMetricsAddrRenamed(t *testing.T) {
	cmd := newWAFProxyCommand()
	var stderr bytes.Buffer
	cmd.Flags().SetOutput(&stderr)
	if err := cmd.ParseFlags([]string{"--metrics-addr", "0"}); err != nil {
		t.Fatal(err)
	}
	if got := cmd.Flags().Lookup("metrics-bind-address").Value.String(); got != "0" || !strings.Contains(stderr.String(), "use --metrics-bind-address instead") {
		t.Errorf("--metrics-addr 0: --metrics-bind-address %q, stderr %q", got, stderr.String())
	}
}

// TestFlagUsagesNameTheirValues: pflag takes a backquoted word in a flag's
// usage as the name of its value, so "needs `make tools`" showed as
// "--node make tools" in portal dev --help. No usage may hold one unless it
// is meant as the value name (a single word in capitals).
func TestFlagUsagesNameTheirValues(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if strings.Contains(f.Usage, "`") && (strings.Contains(name, " ") || strings.ToUpper(name) != name) {
				t.Errorf("%s --%s: its usage backquotes %q, which --help shows as the value's name", c.CommandPath(), f.Name, name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}

// TestRunHelpSaysWhichLayersAreOn: portal run --help says which layers run
// without flags and names every layer's flag.
func TestRunHelpSaysWhichLayersAreOn(t *testing.T) {
	out, err := runCLI(t, "", "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	want := "No layer runs by default: switch each on with its flag (--admission, --audit, --network, --waf, --apigateway, --actions)."
	if !strings.Contains(out, want) {
		t.Errorf("portal run --help does not say %q:\n%s", want, out)
	}
}
