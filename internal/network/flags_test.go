package network_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/network"
)

// TestBindFlags: the flags portal run and portal eval share set the
// configuration, default to DefaultConfig, and their help names every
// registered check.
func TestBindFlags(t *testing.T) {
	bind := func() (*pflag.FlagSet, *network.Config) {
		cfg := network.DefaultConfig()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		network.BindFlags(fs, &cfg)
		network.BindBudgetFlags(fs, &cfg)
		return fs, &cfg
	}
	fs, cfg := bind()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*cfg, network.DefaultConfig()) {
		t.Errorf("no flags given: %+v, want the defaults %+v", *cfg, network.DefaultConfig())
	}
	fs, cfg = bind()
	err := fs.Parse([]string{
		"--network-checks", network.CheckBroadCIDR + "," + network.CheckEgressBlocksDNS,
		"--network-exclude-namespaces", "team-*",
		"--network-broad-cidr-ipv4-prefix", "4", "--network-broad-cidr-ipv6-prefix", "16",
		"--network-max-pod-visits", "10",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := network.Config{
		Checks:            []string{network.CheckBroadCIDR, network.CheckEgressBlocksDNS},
		ExcludeNamespaces: []string{"team-*"}, BroadCIDRIPv4Prefix: 4, BroadCIDRIPv6Prefix: 16, MaxPodVisits: 10,
	}
	if !reflect.DeepEqual(*cfg, want) {
		t.Errorf("flags set %+v, want %+v", *cfg, want)
	}
	help := fs.Lookup("network-checks").Usage
	for _, c := range network.Checks() {
		if !strings.Contains(help, c) {
			t.Errorf("--network-checks help %q does not name %s", help, c)
		}
	}
}
