package network

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/vilaca/portal/internal/core"
)

// Defaults of Config.
const (
	DefaultBroadCIDRIPv4Prefix = 8
	DefaultBroadCIDRIPv6Prefix = 32
	// DefaultMaxPodVisits bounds the pods one namespace's analysis reads
	// while matching selectors.
	DefaultMaxPodVisits = 1_000_000
)

// Config selects the checks and their thresholds. The zero value is not
// useful: start from DefaultConfig.
type Config struct {
	// Checks are the enabled checks by name (see Checks); empty enables
	// every check.
	Checks []string
	// ExcludeNamespaces are namespace names or shell globs ("team-*")
	// whose namespace and policies get no findings. Pods in them still
	// count as peers of other namespaces' policies.
	ExcludeNamespaces []string
	// BroadCIDRIPv4Prefix and BroadCIDRIPv6Prefix: an ipBlock whose prefix
	// is this long or shorter, not inside a private range and without
	// except, is broad.
	BroadCIDRIPv4Prefix int
	BroadCIDRIPv6Prefix int
	// MaxPodVisits bounds the pods and namespaces one namespace's
	// analysis reads while matching selectors (a namespaceSelector peer
	// reads every namespace): a tenant's pathological policies cannot make
	// it run long. Selectors left unchecked when it runs out raise no
	// finding (no false positive), and the analysis counts as truncated.
	MaxPodVisits int
}

// DefaultConfig enables every check with the default thresholds.
func DefaultConfig() Config {
	return Config{
		// The system namespaces, whose policies are the platform's;
		// Portal's own namespace is added by the layer.
		ExcludeNamespaces:   core.SystemNamespaces(),
		BroadCIDRIPv4Prefix: DefaultBroadCIDRIPv4Prefix,
		BroadCIDRIPv6Prefix: DefaultBroadCIDRIPv6Prefix,
		MaxPodVisits:        DefaultMaxPodVisits,
	}
}

// Validate says what to fix in a configuration that cannot work, naming the
// flags `portal run` and `portal eval` set it with.
func (c *Config) Validate() error {
	for _, name := range c.Checks {
		if _, ok := checkRules[name]; !ok || name == CheckInvalid {
			return fmt.Errorf("--network-checks: unknown check %q: use %s", name, strings.Join(Checks(), ", "))
		}
	}
	for _, g := range c.ExcludeNamespaces {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("--network-exclude-namespaces: pattern %q: %w", g, err)
		}
	}
	if c.BroadCIDRIPv4Prefix < 0 || c.BroadCIDRIPv4Prefix > 32 {
		return fmt.Errorf("--network-broad-cidr-ipv4-prefix %d: use 0 to 32", c.BroadCIDRIPv4Prefix)
	}
	if c.BroadCIDRIPv6Prefix < 0 || c.BroadCIDRIPv6Prefix > 128 {
		return fmt.Errorf("--network-broad-cidr-ipv6-prefix %d: use 0 to 128", c.BroadCIDRIPv6Prefix)
	}
	if c.MaxPodVisits <= 0 {
		return fmt.Errorf("--network-max-pod-visits %d: must be positive", c.MaxPodVisits)
	}
	return nil
}

// enabled reports whether check runs.
func (c *Config) enabled(check string) bool {
	return check == CheckInvalid || len(c.Checks) == 0 || slices.Contains(c.Checks, check)
}

// excluded reports whether namespace is left out of the analysis.
func (c *Config) excluded(namespace string) bool {
	for _, g := range c.ExcludeNamespaces {
		if ok, _ := path.Match(g, namespace); ok {
			return true
		}
	}
	return false
}
