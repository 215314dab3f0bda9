package network

import (
	"strings"

	"github.com/spf13/pflag"
)

// BindFlags binds the flags that select the checks and set their
// thresholds to cfg, whose values are the defaults: `portal run --network`
// and `portal eval --network` both call it, so the two commands cannot
// drift apart in names, defaults or help.
func BindFlags(fs *pflag.FlagSet, cfg *Config) {
	fs.StringSliceVar(&cfg.Checks, "network-checks", cfg.Checks,
		"NetworkPolicy checks to run (default: all): "+strings.Join(Checks(), ", "))
	fs.StringSliceVar(&cfg.ExcludeNamespaces, "network-exclude-namespaces", cfg.ExcludeNamespaces,
		"namespaces (names or shell globs) whose Namespace and NetworkPolicies get no NetworkPolicy finding; portal run always adds Portal's own namespace")
	fs.IntVar(&cfg.BroadCIDRIPv4Prefix, "network-broad-cidr-ipv4-prefix", cfg.BroadCIDRIPv4Prefix,
		CheckBroadCIDR+" flags an IPv4 ipBlock without except whose prefix is this short or shorter and not inside a private range")
	fs.IntVar(&cfg.BroadCIDRIPv6Prefix, "network-broad-cidr-ipv6-prefix", cfg.BroadCIDRIPv6Prefix,
		CheckBroadCIDR+" flags an IPv6 ipBlock without except whose prefix is this short or shorter and not inside a private range")
}

// BindBudgetFlags binds the live analyser's per-namespace budget
// (MaxPodVisits) to cfg. Only `portal run` binds it: the cluster's
// objects are its tenants', while `portal eval` reads the caller's own
// manifests with the default budget.
func BindBudgetFlags(fs *pflag.FlagSet, cfg *Config) {
	fs.IntVar(&cfg.MaxPodVisits, "network-max-pod-visits", cfg.MaxPodVisits,
		"pods and namespaces one namespace's analysis may read while matching selectors (each namespaceSelector peer reads the namespaces); selectors left unchecked raise no finding")
}
