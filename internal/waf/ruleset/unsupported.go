package ruleset

// This file applies what a data plane cannot run. The lists themselves
// belong to the drivers (internal/waf/driver's registry; the Istio WASM
// one is in internal/waf/engine/istio.go): the RuleSet controller asks
// each registered driver for its Limits and reports what Unsupported finds
// in status.unsupportedRules and the Degraded condition (reason
// UnsupportedRules) of every RuleSet whose cached revision contains them,
// unless the RuleSet carries the annotation
// waf.portal.io/allow-unsupported-rules: "true".

import (
	"fmt"
	"slices"
	"strings"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// Limits are what one data plane cannot run as written. The zero value is
// a data plane that runs everything the sandbox admits.
type Limits struct {
	// Runtime names the data plane's build of Coraza in messages, for
	// example "the Istio WASM build of Coraza".
	Runtime string
	// Operators maps an operator name (without @, compared without case)
	// to why a rule using it does not work.
	Operators map[string]string
	// Rules maps a rule id to why it does not work.
	Rules map[int]string
}

// Empty reports whether the data plane runs every rule.
func (l Limits) Empty() bool { return len(l.Operators) == 0 && len(l.Rules) == 0 }

// Finding is a rule that a driver cannot run as written.
type Finding struct {
	Driver   wafv1alpha1.DriverType
	RuleID   int
	Operator string
	Reason   string
}

func (f Finding) String() string {
	var what string
	switch {
	case f.RuleID != 0 && f.Operator != "":
		what = fmt.Sprintf("rule %d (@%s)", f.RuleID, f.Operator)
	case f.RuleID != 0:
		what = fmt.Sprintf("rule %d", f.RuleID)
	default:
		what = "@" + f.Operator
	}
	return fmt.Sprintf("%s: %s: %s", f.Driver, what, f.Reason)
}

// Unsupported lists the rules of c that driver, with these limits, cannot
// run as written: rules in the driver's list that are still in the set after SecRuleRemoveById and
// SecRuleRemoveByTag (wherever those stand in the rules), and rules using an
// operator the driver cannot run. Findings are ordered by rule id.
func (c *Compiled) Unsupported(driver wafv1alpha1.DriverType, l Limits) []Finding {
	if l.Empty() {
		return nil
	}
	var out []Finding
	seen := map[int]bool{}
	for _, r := range c.rules {
		if seen[r.ID] || c.removed(r) {
			continue
		}
		if why, ok := l.Rules[r.ID]; ok {
			seen[r.ID] = true
			out = append(out, Finding{Driver: driver, RuleID: r.ID, Reason: why})
		}
	}
	for _, u := range c.analysis.operators {
		for name, why := range l.Operators {
			if strings.EqualFold(u.Name, name) && !c.removed(c.rule(u.RuleID)) {
				src, line := c.Bundle.Locate(u.Line)
				where := fmt.Sprintf(" (line %d)", line)
				if src != "" {
					where = fmt.Sprintf(" (RuleSource %q line %d)", src, line)
				}
				out = append(out, Finding{Driver: driver, RuleID: u.RuleID, Operator: name, Reason: why + where})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Finding) int { return a.RuleID - b.RuleID })
	return out
}

// rule returns what is known of the rule with this id.
func (c *Compiled) rule(id int) ruleInfo {
	for _, r := range c.rules {
		if r.ID == id {
			return r
		}
	}
	return ruleInfo{ID: id}
}

// removed reports whether SecRuleRemoveById or SecRuleRemoveByTag takes r out.
func (c *Compiled) removed(r ruleInfo) bool {
	if r.ID == 0 {
		return false
	}
	for _, rg := range c.analysis.removedIDs {
		if r.ID >= rg[0] && r.ID <= rg[1] {
			return true
		}
	}
	for _, t := range c.analysis.removedTags {
		if slices.Contains(r.Tags, t) {
			return true
		}
	}
	return false
}
