package binding

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

// Match types in a table row, as Gateway API names them.
const (
	MatchExact      = cache.MatchExact
	MatchPathPrefix = cache.MatchPathPrefix
	MatchRegex      = cache.MatchRegex
)

func httpRoute(r *gatewayv1.HTTPRoute) *route {
	rt := &route{key: objKey{KindHTTPRoute, r.Namespace, r.Name}, created: r.CreationTimestamp}
	for _, h := range r.Spec.Hostnames {
		rt.hostnames = append(rt.hostnames, strings.ToLower(string(h)))
	}
	for i, rule := range r.Spec.Rules {
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []gatewayv1.HTTPRouteMatch{{}}
		}
		for j, m := range matches {
			row := cache.TableRow{Route: rt.key.String()}
			row.Path = &cache.StringMatch{Type: MatchPathPrefix, Value: "/"}
			if m.Path != nil {
				if m.Path.Type != nil {
					row.Path.Type = string(*m.Path.Type)
				}
				if m.Path.Value != nil {
					row.Path.Value = *m.Path.Value
				}
			}
			if m.Method != nil {
				row.Method = string(*m.Method)
			}
			for _, h := range m.Headers {
				row.Headers = append(row.Headers, cache.StringMatch{Type: typeOr((*string)(h.Type)), Name: string(h.Name), Value: h.Value})
			}
			for _, q := range m.QueryParams {
				row.Query = append(row.Query, cache.StringMatch{Type: typeOr((*string)(q.Type)), Name: string(q.Name), Value: q.Value})
			}
			rt.add(row, i, j)
		}
	}
	return rt
}

// add adds a row from match j of rule i, with what its expressions cost.
func (rt *route) add(row cache.TableRow, i, j int) {
	rt.rows = append(rt.rows, row)
	n, err := cache.RowInsts(row)
	if err != nil && rt.unsupported == nil {
		rt.unsupported = fmt.Errorf("spec.rules[%d].matches[%d]: %w", i, j, err)
	}
	rt.insts += n
}

// grpcRoute turns gRPC method matches into the path matches they are on
// the wire: /service/method.
func grpcRoute(r *gatewayv1.GRPCRoute) *route {
	rt := &route{key: objKey{KindGRPCRoute, r.Namespace, r.Name}, created: r.CreationTimestamp}
	for _, h := range r.Spec.Hostnames {
		rt.hostnames = append(rt.hostnames, strings.ToLower(string(h)))
	}
	for i, rule := range r.Spec.Rules {
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []gatewayv1.GRPCRouteMatch{{}}
		}
		for j, m := range matches {
			row := cache.TableRow{Route: rt.key.String(), Path: grpcPath(m.Method)}
			for _, h := range m.Headers {
				row.Headers = append(row.Headers, cache.StringMatch{Type: typeOr((*string)(h.Type)), Name: string(h.Name), Value: h.Value})
			}
			rt.add(row, i, j)
		}
	}
	return rt
}

func grpcPath(m *gatewayv1.GRPCMethodMatch) *cache.StringMatch {
	if m == nil || (m.Service == nil && m.Method == nil) {
		return &cache.StringMatch{Type: MatchPathPrefix, Value: "/"}
	}
	svc, method := "", ""
	if m.Service != nil {
		svc = *m.Service
	}
	if m.Method != nil {
		method = *m.Method
	}
	if m.Type != nil && *m.Type == gatewayv1.GRPCMethodMatchRegularExpression {
		return &cache.StringMatch{Type: MatchRegex, Value: "/" + cmp.Or(svc, "[^/]+") + "/" + cmp.Or(method, "[^/]+")}
	}
	switch {
	case method == "":
		return &cache.StringMatch{Type: MatchPathPrefix, Value: "/" + svc}
	case svc == "":
		return &cache.StringMatch{Type: MatchRegex, Value: "/[^/]+/" + regexpQuote(method)}
	}
	return &cache.StringMatch{Type: MatchExact, Value: "/" + svc + "/" + method}
}

func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func typeOr(t *string) string {
	if t == nil {
		return MatchExact
	}
	return *t
}

// tablePolicies dedups the effective policies of one table.
type tablePolicies struct {
	list  []cache.TablePolicy
	index map[string]int
	// last is the id of the policy appended last.
	last string
}

func (tp *tablePolicies) add(st *policyState, ex *cache.Exclusions) int {
	id := st.key.String()
	if ex != nil {
		id += "|" + exclusionsID(ex)
	}
	if i, ok := tp.index[id]; ok {
		return i
	}
	p := cache.TablePolicy{Policy: st.key.String(), FailOpen: st.p.Spec.FailOpen}
	if st.source.available {
		rs := *st.source.ruleSet
		p.RuleSet = &rs
		p.Exclusions = ex
	} else {
		p.Unavailable = cmp.Or(st.source.reason, "Pending") + ": " + st.source.message
	}
	for _, l := range st.p.Spec.SecurityLogs {
		sl := cache.SecurityLog{Name: l.Name, Type: string(l.Destination.Type)}
		if l.Destination.File != nil {
			sl.Path = l.Destination.File.Path
		}
		if l.Destination.Syslog != nil {
			sl.Server, sl.Protocol = l.Destination.Syslog.Server, string(l.Destination.Syslog.Protocol)
		}
		p.SecurityLogs = append(p.SecurityLogs, sl)
	}
	tp.list = append(tp.list, p)
	tp.index[id] = len(tp.list) - 1
	tp.last = id
	return len(tp.list) - 1
}

// pop removes the policy add appended last, for a route left out.
func (tp *tablePolicies) pop() {
	delete(tp.index, tp.last)
	tp.list = tp.list[:len(tp.list)-1]
}

// buildTable makes the route table of Gateway g: every match of every
// route attached to it (routes), in Gateway API precedence order, each
// with the policy it runs. Routes join the table oldest first while they
// fit within the table bounds; the others are left out, and returned
// with why, so one tenant's routes cannot stop a shared Gateway's table,
// and so every other tenant's routes on it, from being served.
func buildTable(g *gatewayv1.Gateway, gk objKey, routes []*route, winners map[objKey]*policyState,
	overrides map[objKey]*cache.Exclusions) (*cache.Table, map[objKey]LeftOut) {
	t := &cache.Table{Gateway: cache.Key(g.Namespace, g.Name), Default: -1}
	tp := &tablePolicies{index: map[string]int{}}
	if st := winners[gk]; st != nil {
		t.Default = tp.add(st, nil)
	}
	fit := newTableFit(t, tp.list)
	left := map[objKey]LeftOut{}
	type sortable struct {
		row   cache.TableRow
		r     *route
		order int
	}
	var rows []sortable
	for _, r := range slices.SortedFunc(slices.Values(routes), byAge) {
		if r.unsupported != nil {
			left[r.key] = unsupported(r)
			continue
		}
		pol, newPolicy := -1, 0
		if st, _ := effective(r.key, gk, winners); st != nil {
			n := len(tp.list)
			if pol = tp.add(st, overrides[r.key]); len(tp.list) > n {
				newPolicy = cache.PolicySize(tp.list[pol])
			}
		}
		if err := fit.admit(r, r.hosts[gk], pol, newPolicy); err != nil {
			if newPolicy > 0 {
				tp.pop()
			}
			left[r.key] = tooLarge(r, gk, err)
			continue
		}
		for _, h := range r.hosts[gk] {
			for i, row := range r.rows {
				row.Policy = pol
				if h != "" {
					row.Hostnames = []string{h}
				}
				rows = append(rows, sortable{row: row, r: r, order: i})
			}
		}
	}
	slices.SortStableFunc(rows, func(a, b sortable) int {
		if c := comparePrecedence(a.row, b.row); c != 0 {
			return c
		}
		if c := a.r.created.Compare(b.r.created.Time); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.row.Route, b.row.Route), cmp.Compare(a.order, b.order))
	})
	for _, s := range rows {
		t.Rows = append(t.Rows, s.row)
	}
	t.Policies = tp.list
	return t, left
}

// comparePrecedence orders two matches as Gateway API's HTTPRouteRule
// precedence does: the more specific hostname (exact before wildcard,
// longer first), then Exact path before PathPrefix (longest first) before
// RegularExpression, then a method, then more headers, then more query
// parameters. Ties are broken by the caller (oldest route, namespace/name,
// rule order).
func comparePrecedence(a, b cache.TableRow) int {
	if c := cmp.Compare(hostRank(b.Hostnames), hostRank(a.Hostnames)); c != 0 {
		return c
	}
	if c := cmp.Compare(pathRank(b.Path), pathRank(a.Path)); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.Path.Value), len(a.Path.Value)); c != 0 && a.Path.Type == b.Path.Type && a.Path.Type != MatchRegex {
		return c
	}
	if c := cmpBool(b.Method != "", a.Method != ""); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.Headers), len(a.Headers)); c != 0 {
		return c
	}
	return cmp.Compare(len(b.Query), len(a.Query))
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// hostRank: exact hostnames above wildcards above none, longer first.
func hostRank(hs []string) int {
	if len(hs) == 0 {
		return 0
	}
	h := hs[0]
	if strings.HasPrefix(h, "*.") {
		return 1000 + len(h)
	}
	return 10000 + len(h)
}

func pathRank(p *cache.StringMatch) int {
	switch p.Type {
	case MatchExact:
		return 3
	case MatchPathPrefix:
		return 2
	}
	return 1
}

// resolveOverrides decides each RuleSetOverride's outcome and returns the
// exclusions in force per route.
func resolveOverrides(list []*wafv1alpha1.RuleSetOverride, routes map[objKey]*route, winners map[objKey]*policyState,
	_ []*policyState, res *Result) map[objKey]*cache.Exclusions {
	slices.SortFunc(list, func(a, b *wafv1alpha1.RuleSetOverride) int { return older(a.ObjectMeta, b.ObjectMeta) })
	out := map[objKey]*cache.Exclusions{}
	taken := map[objKey]string{}
	for _, o := range list {
		status := wafv1alpha1.RuleSetOverrideStatus{ObservedGeneration: o.Generation}
		reason, msg := string(gatewayv1.PolicyReasonAccepted), "The override is in force on every target"
		fail := func(r, m string) {
			if reason == string(gatewayv1.PolicyReasonAccepted) {
				reason, msg = r, m
			}
		}
		for i, t := range o.Spec.TargetRefs {
			if i >= wafv1alpha1.MaxPolicyTargets {
				break
			}
			k := objKey{string(t.Kind), o.Namespace, string(t.Name)}
			eff := wafv1alpha1.EffectiveOverride{Kind: k.Kind, Name: k.Name}
			r, ok := routes[k]
			switch {
			case !ok || (k.Kind != KindHTTPRoute && k.Kind != KindGRPCRoute):
				fail(string(gatewayv1.PolicyReasonTargetNotFound), k.Kind+" "+k.Name+" not found in namespace "+k.Namespace)
			case taken[k] != "":
				fail(string(gatewayv1.PolicyReasonConflicted), "RuleSetOverride "+taken[k]+", older, already targets "+k.Kind+" "+k.Name)
			default:
				taken[k] = o.Namespace + "/" + o.Name
				if ex, rs, r2, m := permit(o, r, winners); r2 != "" {
					fail(r2, m)
					eff.RuleSet = rs
				} else {
					out[k] = ex
					eff.RuleSet, eff.DisabledRuleIDs, eff.DisabledTags, eff.InboundAnomalyThreshold = rs, ex.RuleIDs, ex.Tags, ex.InboundAnomalyThreshold
				}
			}
			status.Routes = append(status.Routes, eff)
		}
		cond := metaCondition(string(gatewayv1.PolicyConditionAccepted), reason == string(gatewayv1.PolicyReasonAccepted), reason, msg, o.Generation)
		status.Conditions = []metav1.Condition{cond}
		res.Overrides[nn(o.Namespace, o.Name)] = status
	}
	return out
}

// permit checks an override against the rule set of every policy its
// route runs; it applies only when all of them permit all of it.
func permit(o *wafv1alpha1.RuleSetOverride, r *route, winners map[objKey]*policyState) (*cache.Exclusions, *wafv1alpha1.EffectiveRuleSet, string, string) {
	var rs *wafv1alpha1.EffectiveRuleSet
	var sts []*policyState
	if st := winners[r.key]; st != nil {
		sts = append(sts, st)
	} else {
		for _, gw := range r.parents {
			if st := winners[gw]; st != nil && !slices.Contains(sts, st) {
				sts = append(sts, st)
			}
		}
	}
	if len(sts) == 0 {
		return nil, nil, wafv1alpha1.ReasonNoRuleSet, r.key.Kind + " " + r.key.Name + " runs no WAFGatewayBindingPolicy"
	}
	for _, st := range sts {
		src := st.source
		if st.p.Spec.RuleSet == nil || src.ruleSet == nil {
			return nil, nil, wafv1alpha1.ReasonNoRuleSet, r.key.Kind + " " + r.key.Name + " runs WAFGatewayBindingPolicy " + st.key.String() + ", which has no Portal RuleSet in force"
		}
		if rs == nil {
			rs = &wafv1alpha1.EffectiveRuleSet{Namespace: src.ruleSet.Namespace, Name: src.ruleSet.Name, Revision: src.ruleSet.UUID}
		}
		if m := notPermitted(o.Spec, src.perms); m != "" {
			return nil, rs, wafv1alpha1.ReasonNotPermitted, "RuleSet " + cache.Key(src.ruleSet.Namespace, src.ruleSet.Name) + " " + m
		}
	}
	ex := &cache.Exclusions{RuleIDs: slices.Sorted(slices.Values(o.Spec.DisableRuleIDs)), Tags: slices.Sorted(slices.Values(o.Spec.DisableTags)),
		InboundAnomalyThreshold: o.Spec.InboundAnomalyThreshold}
	ex.RuleIDs, ex.Tags = slices.Compact(ex.RuleIDs), slices.Compact(ex.Tags)
	return ex, rs, "", ""
}

// notPermitted says what of spec perms does not allow; empty when all is.
func notPermitted(spec wafv1alpha1.RuleSetOverrideSpec, perms *wafv1alpha1.OverridePermissions) string {
	if perms == nil {
		perms = &wafv1alpha1.OverridePermissions{}
	}
	for _, id := range spec.DisableRuleIDs {
		if !slices.ContainsFunc(perms.RuleIDs, func(r wafv1alpha1.RuleIDRange) bool { return r.Contains(id) }) {
			return "does not permit disabling rule " + itoa(id) + " (spec.overrides.ruleIDs)"
		}
	}
	for _, tag := range spec.DisableTags {
		if !slices.Contains(perms.Tags, tag) {
			return "does not permit disabling tag " + tag + " (spec.overrides.tags)"
		}
	}
	if th := spec.InboundAnomalyThreshold; th > 0 && th > perms.MaxInboundAnomalyThreshold {
		return "does not permit an inbound anomaly threshold of " + itoa(int64(th)) + " (spec.overrides.maxInboundAnomalyThreshold is " + itoa(int64(perms.MaxInboundAnomalyThreshold)) + ")"
	}
	return ""
}
