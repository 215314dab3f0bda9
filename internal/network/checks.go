package network

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/vilaca/portal/internal/core"
)

// A Check is one NetworkPolicy check: a pure function over one namespace's
// model that adds a message per problem it finds. Everything else a check
// needs (the flag value that enables it, its metric label, its rule in
// reports, the chart's schema, the docs' table) derives from its
// registration; see docs/contributing/adding-a-check.md.
type Check struct {
	// Name is the rule name the check's findings carry, "np.<words>": it is
	// also the --network-checks value and the metric label.
	Name string
	// Severity is fixed per check.
	Severity core.Severity
	// Summary says in one line what a finding means: the message of the
	// check's rule and the docs' table of checks.
	Summary string
	// Namespace checks the namespace itself: its findings are on the
	// Namespace. Set it or Policy, not both.
	Namespace func(ns *Namespace, m *Messages)
	// Policy checks one readable NetworkPolicy of the namespace: its
	// findings are on the policy.
	Policy func(ns *Namespace, p *Policy, m *Messages)
}

// On names the kind of object the check's findings are on.
func (c *Check) On() string {
	if c.Namespace != nil {
		return namespaceKind
	}
	return policyKind
}

// CheckInvalid is a policy the analysis cannot read (a selector that does
// not parse): only manifests hold one, the API server rejects it. It is
// not a Check: it always runs, instead of the checks, on such a policy.
const CheckInvalid = "np.invalid-policy"

// RuleSourceKind is the rule source kind of the checks' synthetic rules, as
// reports show it (properties.ruleSource).
const RuleSourceKind = "builtin"

// Category is the category of every check's findings, so Policy Reporter
// groups them as it groups the rules' results by theirs.
const Category = "Network Policies"

// checkName is what a check may be called: it travels as a flag value, a
// metric label and a Helm enum, so it is short and plain.
var checkName = regexp.MustCompile(`^np\.[a-z0-9]+(-[a-z0-9]+)*$`)

// The registry, written by Register from init functions only. registry
// keeps registration order, the order a policy's checks run in, so a
// truncated analysis spends its budget the same way on every run.
var (
	registry   []Check
	checkRules = map[string]*core.Rule{
		CheckInvalid: newCheckRule(CheckInvalid, core.SeverityMedium, "the policy cannot be read"),
	}
)

// Register adds a check. Call it from an init function: a check registered
// later is not in the flags' help or the metrics. It panics on a name that
// is taken or malformed, a severity that is not one of core's, or a check
// with no function or two: each is a programming error.
func Register(c Check) {
	switch {
	case !checkName.MatchString(c.Name) || len(c.Name) > 63:
		panic(fmt.Sprintf("network: check name %q: want np.<lowercase words joined by ->, at most 63 bytes", c.Name))
	case checkRules[c.Name] != nil:
		panic(fmt.Sprintf("network: check %q registered twice", c.Name))
	case !slices.Contains([]core.Severity{core.SeverityCritical, core.SeverityHigh, core.SeverityMedium, core.SeverityLow, core.SeverityInfo}, c.Severity):
		panic(fmt.Sprintf("network: check %q: severity %q", c.Name, c.Severity))
	case (c.Namespace == nil) == (c.Policy == nil):
		panic(fmt.Sprintf("network: check %q: set exactly one of Namespace and Policy", c.Name))
	case c.Summary == "":
		panic(fmt.Sprintf("network: check %q: no summary", c.Name))
	}
	registry = append(registry, c)
	checkRules[c.Name] = newCheckRule(c.Name, c.Severity, c.Summary)
}

func newCheckRule(name string, sev core.Severity, summary string) *core.Rule {
	return &core.Rule{
		Name: name, Enabled: true, Severity: sev, Category: Category, Modes: []core.Mode{core.ModeAudit},
		Message: summary, Source: core.Source{Kind: RuleSourceKind, Name: name},
	}
}

// Checks lists the checks a configuration may enable, sorted.
func Checks() []string {
	out := make([]string, 0, len(registry))
	for _, c := range registry {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return out
}

// Rule returns the synthetic rule of a check, nil for an unknown name.
func Rule(check string) *core.Rule { return checkRules[check] }
