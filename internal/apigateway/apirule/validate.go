package apirule

import (
	"fmt"
	"reflect"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
)

// maxRegexInsts bounds the compiled size of a user's regular expression.
// RE2 runs in linear time, but a large program costs memory in every Envoy
// of the gateway; 2,000 instructions is far beyond any header or origin
// match and far below what would hurt.
const maxRegexInsts = 2000

// maxPathLength is the schema's bound on a rule path (MaxLength in
// api/gateway/v1alpha1), checked again here like its pattern.
const maxPathLength = 1024

// Problem is why an APIRule cannot be applied: a reason for the Ready
// condition (gatewayv1alpha1.Reason*) and a message that says what to fix.
type Problem struct {
	Reason  string
	Message string
}

func (p *Problem) Error() string { return p.Reason + ": " + p.Message }

func invalid(format string, args ...any) *Problem {
	return &Problem{Reason: gatewayv1alpha1.ReasonInvalid, Message: fmt.Sprintf(format, args...)}
}

// ValidateSpec checks what the API server's schema cannot: services stay
// in the APIRule's namespace, paths are well formed and no rule is hidden
// by an earlier one, regular expressions compile within a bound, JWT
// settings agree per issuer, and no header match opens a path that a
// stricter rule guards. It reads nothing from the cluster.
func ValidateSpec(api *gatewayv1alpha1.APIRule) *Problem {
	if p := validateServices(api); p != nil {
		return p
	}
	rules := api.Spec.Rules
	for i := range rules {
		if p := validatePath(rules[i].Path); p != nil {
			p.Message = fmt.Sprintf("rules[%d].path %q: %s", i, rules[i].Path, p.Message)
			return p
		}
		if m := rules[i].Match; m != nil {
			for _, h := range m.Headers {
				if h.Regex != nil {
					if err := CheckRegex(*h.Regex); err != nil {
						return invalid("rules[%d].match.headers[%s].regex: %v", i, h.Name, err)
					}
				}
			}
		}
	}
	if c := api.Spec.CorsPolicy; c != nil {
		for i, o := range c.AllowOrigins {
			if o.Regex != nil {
				if err := CheckRegex(*o.Regex); err != nil {
					return invalid("corsPolicy.allowOrigins[%d].regex: %v", i, err)
				}
			}
		}
	}
	if p := validateHidden(rules); p != nil {
		return p
	}
	if p := validateIssuers(rules); p != nil {
		return p
	}
	return validateHeaderGaps(rules)
}

// validateServices refuses a service in another namespace: an APIRule's
// author may only expose what their own namespace runs.
func validateServices(api *gatewayv1alpha1.APIRule) *Problem {
	check := func(where string, s *gatewayv1alpha1.Service) *Problem {
		if s != nil && s.Namespace != nil && *s.Namespace != api.Namespace {
			return &Problem{Reason: gatewayv1alpha1.ReasonCrossNamespaceService, Message: fmt.Sprintf(
				"%s.namespace is %q: an APIRule may only expose Services of its own namespace (%q); create the APIRule in %q instead",
				where, *s.Namespace, api.Namespace, *s.Namespace)}
		}
		return nil
	}
	if p := check("spec.service", api.Spec.Service); p != nil {
		return p
	}
	for i := range api.Spec.Rules {
		if p := check(fmt.Sprintf("rules[%d].service", i), api.Spec.Rules[i].Service); p != nil {
			return p
		}
		if api.Spec.Rules[i].Service == nil && api.Spec.Service == nil {
			return invalid("rules[%d] has no service and spec.service is unset", i)
		}
	}
	return nil
}

// CheckRegex compiles an RE2 expression as Envoy would take it and refuses
// one whose program is larger than the bound.
func CheckRegex(expr string) error {
	n, err := regexInsts(expr)
	if err != nil {
		return err
	}
	if n > maxRegexInsts {
		return fmt.Errorf("too complex (%d instructions compiled, at most %d): simplify it or use exact or prefix", n, maxRegexInsts)
	}
	return nil
}

// regexInsts is the size of expr's compiled program.
func regexInsts(expr string) (int, error) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 0, fmt.Errorf("not a valid RE2 expression: %w", err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0, fmt.Errorf("not a valid RE2 expression: %w", err)
	}
	return len(prog.Inst), nil
}

// segments splits a rule path; `/*` is `/{**}`.
func segments(path string) []string {
	if path == "/*" {
		path = "/{**}"
	}
	return strings.Split(path, "/")[1:]
}

// pathSyntax is the schema's pattern for a rule path, checked again here
// so nothing that reaches the generator depends on the API server's
// validation alone.
var pathSyntax = regexp.MustCompile(`^((/([A-Za-z0-9-._~!$&'()+,;=:@]|%[0-9a-fA-F]{2})*)|(/\{\*{1,2}\}))+$|^/\*$`)

func validatePath(path string) *Problem {
	if len(path) > maxPathLength {
		return invalid("longer than %d characters", maxPathLength)
	}
	if !pathSyntax.MatchString(path) {
		return invalid("a path is /-separated segments of letters, digits, -._~!$&'()+,;=:@ and %%XX escapes, {*} or {**}, or /*")
	}
	segs := segments(path)
	for i, s := range segs {
		switch {
		case s == "{**}" && i != len(segs)-1:
			return invalid("{**} may only be the last segment")
		case s != "{*}" && s != "{**}" && strings.ContainsAny(s, "{}*"):
			return invalid("a segment is either {*}, {**} or has none of the characters { } *")
		}
	}
	// The route matches the path with a regular expression, held to the
	// bound of users' own: within maxPathLength only paths of hundreds of
	// {*} segments cross it.
	if n, err := regexInsts(PathRegex(path)); err != nil || n > maxRegexInsts {
		return invalid("its route's regular expression takes %d instructions, more than %d: use fewer {*} segments", n, maxRegexInsts)
	}
	return nil
}

// covers reports whether every path that l matches is matched by e.
func covers(e, l []string) bool {
	switch {
	case len(e) > 0 && e[0] == "{**}":
		return true
	case len(e) == 0 || len(l) == 0:
		return len(e) == len(l)
	case l[0] == "{**}":
		return false
	case e[0] == "{*}":
		return l[0] != "" && covers(e[1:], l[1:])
	case e[0] == l[0]:
		return covers(e[1:], l[1:])
	}
	return false
}

// overlaps reports whether some path is matched by both a and b.
func overlaps(a, b []string) bool {
	switch {
	case len(a) > 0 && a[0] == "{**}", len(b) > 0 && b[0] == "{**}":
		return true
	case len(a) == 0 || len(b) == 0:
		return len(a) == len(b)
	case a[0] == "{*}" && b[0] == "{*}":
		return overlaps(a[1:], b[1:])
	case a[0] == "{*}":
		return b[0] != "" && overlaps(a[1:], b[1:])
	case b[0] == "{*}":
		return a[0] != "" && overlaps(a[1:], b[1:])
	case a[0] == b[0]:
		return overlaps(a[1:], b[1:])
	}
	return false
}

// sharedMethod is a method both lists take ("" when none; "any" when
// both take every method).
func sharedMethod(a, b []gatewayv1alpha1.HTTPMethod) (string, bool) {
	switch {
	case len(a) == 0 && len(b) == 0:
		return "any", true
	case len(a) == 0:
		return string(b[0]), true
	case len(b) == 0:
		return string(a[0]), true
	}
	for _, m := range b {
		if slices.Contains(a, m) {
			return string(m), true
		}
	}
	return "", false
}

// validateHidden refuses a rule that an earlier rule hides: a request takes
// the first rule that matches, so a later rule whose path the earlier one
// covers, for a method both take, would never be used for it.
func validateHidden(rules []gatewayv1alpha1.Rule) *Problem {
	for l := range rules {
		for e := range l {
			if rules[e].Match != nil && !reflect.DeepEqual(rules[e].Match, rules[l].Match) {
				continue
			}
			m, ok := sharedMethod(rules[e].Methods, rules[l].Methods)
			if ok && covers(segments(rules[e].Path), segments(rules[l].Path)) {
				return invalid("rules[%d] (path %s, method %s) is never used: rules[%d] (path %s) comes first and takes the same requests; put the more specific rule first",
					l, rules[l].Path, m, e, rules[e].Path)
			}
		}
	}
	return nil
}

// validateIssuers: Istio merges every RequestAuthentication of a workload,
// so one issuer must be configured the same way in every rule.
func validateIssuers(rules []gatewayv1alpha1.Rule) *Problem {
	seen := map[string]gatewayv1alpha1.JwtAuthentication{}
	where := map[string]int{}
	for i := range rules {
		jwt := rules[i].Jwt
		if jwt == nil && rules[i].ExtAuth != nil {
			jwt = rules[i].ExtAuth.Restrictions
		}
		if jwt == nil {
			continue
		}
		for _, a := range jwt.Authentications {
			prev, ok := seen[a.Issuer]
			if !ok {
				seen[a.Issuer], where[a.Issuer] = a, i
				continue
			}
			if !reflect.DeepEqual(prev, a) {
				return invalid("rules[%d] and rules[%d] configure issuer %q differently (jwksUri, fromHeaders or fromParams): an issuer has one configuration per APIRule",
					where[a.Issuer], i, a.Issuer)
			}
		}
	}
	return nil
}

// unenforceable reports whether a header match has no AuthorizationPolicy
// form: a regex, or a value whose leading or trailing `*` the policy would
// read as a wildcard.
func unenforceable(m *gatewayv1alpha1.Match) (string, bool) {
	if m == nil {
		return "", false
	}
	for _, h := range m.Headers {
		switch {
		case h.Regex != nil:
			return h.Name, true
		case h.Exact != nil && (strings.HasPrefix(*h.Exact, "*") || strings.HasSuffix(*h.Exact, "*")):
			return h.Name, true
		case h.Prefix != nil && strings.HasPrefix(*h.Prefix, "*"):
			return h.Name, true
		}
	}
	return "", false
}

// access is what a rule asks of a request.
func access(r *gatewayv1alpha1.Rule) any {
	return struct {
		noAuth bool
		jwt    *gatewayv1alpha1.JwtConfig
		ext    *gatewayv1alpha1.ExtAuth
	}{r.NoAuth != nil && *r.NoAuth, r.Jwt, r.ExtAuth}
}

// validateHeaderGaps: the AuthorizationPolicy of a rule whose header match
// it cannot express allows the rule's path without that header; when another
// rule on an overlapping path asks for different authentication, requests
// routed to that rule would pass with this rule's.
func validateHeaderGaps(rules []gatewayv1alpha1.Rule) *Problem {
	for i := range rules {
		name, ok := unenforceable(rules[i].Match)
		if !ok {
			continue
		}
		for j := range rules {
			if j == i || reflect.DeepEqual(access(&rules[i]), access(&rules[j])) {
				continue
			}
			if _, shared := sharedMethod(rules[i].Methods, rules[j].Methods); shared && overlaps(segments(rules[i].Path), segments(rules[j].Path)) {
				return invalid("rules[%d] matches header %q by regex (or a value with a leading or trailing *), which the authorization policy cannot check, and rules[%d] on an overlapping path asks for different authentication: requests for rules[%d] would pass with rules[%d]'s; use exact or prefix, or give both rules the same authentication",
					i, name, j, j, i)
			}
		}
	}
	return nil
}
