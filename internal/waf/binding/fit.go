package binding

import (
	"cmp"
	"fmt"
	"strings"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

// LeftOut says why a route is not in a Gateway's route table: reason
// TableLimitExceeded or UnsupportedMatch, and a message naming the bound.
type LeftOut struct {
	Reason, Message string
}

// byAge is the order routes join a table: oldest first, then
// namespace/name, then kind, so older tenants keep their routes when a
// table is full and the choice does not change from one reconcile to the
// next.
func byAge(a, b *route) int {
	if c := a.created.Compare(b.created.Time); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.key.Namespace, b.key.Namespace), strings.Compare(a.key.Name, b.key.Name),
		strings.Compare(a.key.Kind, b.key.Kind))
}

// tableFit counts what the routes admitted to one table so far take of
// its bounds: rows, encoded bytes (counted, never encoded) and the regex
// instructions a request host meets.
type tableFit struct {
	rows  int
	size  cache.TableSize
	regex cache.RegexLoad
	// policies is how many the table holds.
	policies int
}

// newTableFit starts from t with only its policies so far.
func newTableFit(t *cache.Table, policies []cache.TablePolicy) *tableFit {
	f := &tableFit{size: cache.NewTableSize(t.Gateway, t.Default), policies: len(policies)}
	for _, p := range policies {
		f.size.AddPolicy(cache.PolicySize(p))
	}
	return f
}

// admit counts route r's rows on hosts, running policy index pol, and a
// new policy of newPolicy encoded bytes when it is not 0, if the table
// stays within its bounds with them; else it counts nothing and says
// which bound they would pass.
func (f *tableFit) admit(r *route, hosts []string, pol, newPolicy int) error {
	if newPolicy > 0 && f.policies+1 > cache.MaxTablePolicies {
		return fmt.Errorf("its policy (rule set and override) would be the table's policy number %d, past the bound of %d: each is a WAF the Gateway's waf-proxy compiles and keeps; share a RuleSetOverride's settings between routes",
			f.policies+1, cache.MaxTablePolicies)
	}
	n := len(hosts) * len(r.rows)
	if f.rows+n > cache.MaxTableRows {
		return fmt.Errorf("its %d rows (%d matches x %d hostnames) would take the table to %d rows, past the bound of %d",
			n, len(r.rows), len(hosts), f.rows+n, cache.MaxTableRows)
	}
	// Each match becomes a row per hostname, the same but for it.
	hostBytes := 0
	for _, h := range hosts {
		hostBytes += cache.HostnameSize(h)
	}
	bytes := 0
	for _, row := range r.rows {
		row.Policy = pol
		bytes += cache.RowSize(row)*len(hosts) + hostBytes
	}
	size := f.size
	if newPolicy > 0 {
		size.AddPolicy(newPolicy)
	}
	size.AddRows(n, bytes)
	if size.Bytes() > cache.MaxTableBytes {
		return fmt.Errorf("its rows would take the encoded table to %d bytes, past the bound of %d", size.Bytes(), cache.MaxTableBytes)
	}
	if err := f.regex.Add(hosts, r.insts); err != nil {
		return err
	}
	f.rows += n
	f.size = size
	if newPolicy > 0 {
		f.policies++
	}
	return nil
}

func tooLarge(r *route, gw objKey, err error) LeftOut {
	return LeftOut{Reason: wafv1alpha1.ReasonTableLimitExceeded, Message: fmt.Sprintf(
		"%s %s/%s is left out of the route table of Gateway %s/%s: %v. Routes join a table oldest first (creationTimestamp, then namespace/name), so the newest are left out first",
		r.key.Kind, r.key.Namespace, r.key.Name, gw.Namespace, gw.Name, err)}
}

func unsupported(r *route) LeftOut {
	return LeftOut{Reason: wafv1alpha1.ReasonUnsupportedMatch, Message: fmt.Sprintf(
		"%s %s/%s is left out of the route tables of its Gateways: %v", r.key.Kind, r.key.Namespace, r.key.Name, r.unsupported)}
}
