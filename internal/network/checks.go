package network

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/vilaca/portal/internal/core"
)

// The checks, by the rule name their findings carry.
const (
	CheckDefaultDenyMissing   = "np.default-deny-missing"
	CheckBroadCIDR            = "np.broad-cidr"
	CheckUnreachableSelector  = "np.unreachable-selector"
	CheckPolicyWithoutTargets = "np.policy-without-targets"
	CheckMissingPolicyTypes   = "np.missing-policy-types"
	CheckPortWithoutProtocol  = "np.port-without-protocol"
	CheckEgressBlocksDNS      = "np.egress-blocks-dns"
	// CheckInvalid is a policy the analysis cannot read (a selector that
	// does not parse): only manifests hold one, the API server rejects it.
	CheckInvalid = "np.invalid-policy"
)

// RuleSourceKind is the rule source kind of the checks' synthetic rules, as
// reports show it (properties.ruleSource).
const RuleSourceKind = "builtin"

// checkRules are the synthetic rules the checks' findings carry, so reports,
// alerts and metrics show them as they show rules.
var checkRules = map[string]*core.Rule{}

// Category is the category of every check's findings, so Policy Reporter
// groups them as it groups the rules' results by theirs.
const Category = "Network Policies"

func init() {
	for _, c := range []struct {
		name     string
		severity core.Severity
		message  string
	}{
		{CheckDefaultDenyMissing, core.SeverityMedium, "namespace has pods and no default-deny ingress NetworkPolicy"},
		{CheckBroadCIDR, core.SeverityHigh, "ipBlock opens the policy to a large part of the internet"},
		{CheckUnreachableSelector, core.SeverityLow, "a peer selector matches nothing, so its rule allows nothing"},
		{CheckPolicyWithoutTargets, core.SeverityLow, "the policy's podSelector selects no pod"},
		{CheckMissingPolicyTypes, core.SeverityLow, "policyTypes is missing or leaves out a direction the policy has rules for"},
		{CheckPortWithoutProtocol, core.SeverityLow, "a port names no protocol and so means TCP only"},
		{CheckEgressBlocksDNS, core.SeverityMedium, "egress is isolated and no rule allows DNS to kube-dns"},
		{CheckInvalid, core.SeverityMedium, "the policy cannot be read"},
	} {
		checkRules[c.name] = &core.Rule{
			Name: c.name, Enabled: true, Severity: c.severity, Category: Category, Modes: []core.Mode{core.ModeAudit},
			Message: c.message, Source: core.Source{Kind: RuleSourceKind, Name: c.name},
		}
	}
}

// Checks lists the checks a configuration may enable, sorted.
func Checks() []string {
	out := make([]string, 0, len(checkRules))
	for name := range checkRules {
		if name != CheckInvalid {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Rule returns the synthetic rule of a check, nil for an unknown name.
func Rule(check string) *core.Rule { return checkRules[check] }

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
