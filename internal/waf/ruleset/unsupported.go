package ruleset

// This file is the one place that lists what each data plane cannot run.
// Keep it in step with the data planes: add a driver's limits here, and the
// RuleSet controller reports them in status.unsupportedRules and the
// Degraded condition (reason UnsupportedRules) of every RuleSet whose cached
// revision contains them, unless the RuleSet carries the annotation
// waf.portal.io/allow-unsupported-rules: "true".
//
// Sources:
//
//   - Operators: Coraza v3.8.1 built with TinyGo (the Istio WASM plugin)
//     registers @inspectFile, @rbl and @validateSchema as @unconditionalMatch
//     (internal/operators/*_tinygo.go): a rule using one matches every
//     request, so a blocking rule blocks all traffic.
//   - Rule ids: the Coraza Kubernetes Operator's list of OWASP CRS rules that
//     fail in its Istio WASM mode (internal/rulesets/unsupported.go there,
//     from its LIMITATIONS.md and CRS regression runs). "incompatible" rules
//     do not work in WASM mode; "redundant" rules work, but Envoy rejects or
//     rewrites part of what they look for before the WAF sees it.

import (
	"fmt"
	"slices"
	"strings"
)

// Driver names a data plane.
type Driver string

const (
	// DriverIstioWASM is Coraza compiled with TinyGo, running as an Istio
	// WasmPlugin inside Envoy.
	DriverIstioWASM Driver = "istio-wasm"
	// DriverWAFProxy is `portal waf-proxy`: Coraza compiled with Go, the same
	// build that validates rules in the controller. It runs everything the
	// sandbox admits.
	DriverWAFProxy Driver = "waf-proxy"
)

// Drivers lists the data planes that have limitations.
func Drivers() []Driver { return []Driver{DriverIstioWASM} }

type limits struct {
	operators map[string]string
	rules     map[int]string
}

const unconditional = "the TinyGo build of Coraza runs it as @unconditionalMatch: the rule matches every request"

var driverLimits = map[Driver]limits{
	DriverIstioWASM: {
		operators: map[string]string{
			"inspectFile":    unconditional,
			"rbl":            unconditional,
			"validateSchema": unconditional,
		},
		rules: istioWASMRules(),
	},
}

func istioWASMRules() map[int]string {
	r := map[int]string{
		// incompatible: does not work in WASM mode.
		920171: "incompatible: a GET or HEAD request with a body is not detected",
		920274: "incompatible: Envoy's :path pseudo-header triggers false positives (paranoia level 4)",
		920430: "incompatible: an invalid HTTP protocol version is not detected",
		922110: "incompatible: multipart charset detection does not work behind Envoy",
		932300: "incompatible: fails with multiphase evaluation",
		933120: "incompatible: fails with multiphase evaluation",
		934120: "incompatible: enclosed alphanumerics are not detected over HTTP/2",
		941310: "incompatible: raw non-ASCII body bytes and XML attribute values are not inspected",
	}
	for id, why := range map[int]string{
		920270: "blocked at a different layer",
		921140: "blocked at a different layer",
		921250: "cookie $Version is not detected",
		922130: "multipart header regex behaves differently",
		932200: "an earlier rule matches instead",
		941210: "HTML entity decoding differs",
		944200: "Java deserialization pattern is not detected",
		959100: "the blocking evaluation does not re-run",
		980170: "the correlation does not re-run",
	} {
		r[id] = "incompatible (cause under investigation): " + why
	}
	for _, id := range []int{911100, 920100, 949110} {
		r[id] = "redundant: Envoy rejects some invalid methods and request lines with 400 before the WAF"
	}
	for _, id := range []int{920181, 920210} {
		r[id] = "redundant: Envoy enforces part of the protocol before the WAF"
	}
	for _, id := range []int{920280, 920290, 920300, 920310, 920311, 920320, 920330, 920610} {
		r[id] = "redundant: Envoy normalizes missing or empty headers over HTTP/2"
	}
	for _, id := range []int{932161, 932207, 932237, 932239, 932390, 941101, 941110, 941120, 942280} {
		r[id] = "redundant: Envoy sanitizes some malicious header values before the WAF"
	}
	return r
}

// Finding is a rule that a driver cannot run as written.
type Finding struct {
	Driver   Driver
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

// Unsupported lists the rules of c that driver cannot run as written: rules
// in the driver's list that are still in the set after SecRuleRemoveById and
// SecRuleRemoveByTag (wherever those stand in the rules), and rules using an
// operator the driver cannot run. Findings are ordered by rule id.
func (c *Compiled) Unsupported(driver Driver) []Finding {
	l, ok := driverLimits[driver]
	if !ok {
		return nil
	}
	var out []Finding
	seen := map[int]bool{}
	for _, r := range c.rules {
		if seen[r.ID] || c.removed(r) {
			continue
		}
		if why, ok := l.rules[r.ID]; ok {
			seen[r.ID] = true
			out = append(out, Finding{Driver: driver, RuleID: r.ID, Reason: why})
		}
	}
	for _, u := range c.analysis.operators {
		for name, why := range l.operators {
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
