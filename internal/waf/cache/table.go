package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Bounds of a route table: what one Gateway's routes may make the cache
// hold and every data plane of that Gateway download.
const (
	// MaxTableRows is the most rows (route matches) a table holds.
	MaxTableRows = 16384
	// MaxTableBytes is the largest encoded table.
	MaxTableBytes = 8 << 20
	// MaxTablePolicies is the most policies a table holds. Each distinct
	// one (rule set revision, a route's override, security logs) is a
	// WAF the Gateway's waf-proxy compiles and keeps (about 6.5 MB each
	// for the CRS): without a bound, a tenant giving each of many routes
	// its own override threshold grows the shared proxy by a WAF per
	// route.
	MaxTablePolicies = 32
)

// ErrTableTooLarge is returned by PutTable for a table beyond the bounds.
var ErrTableTooLarge = errors.New("route table too large")

// Table is what `GET /tables/{namespace}/{gateway}` returns: for one
// Gateway, which rule set each route match runs. Rows are in Gateway API
// match precedence order: a data plane runs the first row that matches a
// request, and Default when none does.
type Table struct {
	// Gateway is namespace/name.
	Gateway string `json:"gateway"`
	// Policies are the effective policies the rows point at.
	Policies []TablePolicy `json:"policies,omitempty"`
	// Rows are the route matches, most precedent first.
	Rows []TableRow `json:"rows,omitempty"`
	// Default is the index in Policies of the Gateway-level policy, for
	// requests no row matches; -1 when the Gateway has none (the data
	// plane's default rule set, if any, then runs them).
	Default int `json:"default"`
}

// TablePolicy is an effective policy: a rule set, with a route's
// override on top, and what to do while it is unavailable.
type TablePolicy struct {
	// Policy is the WAFGatewayBindingPolicy, namespace/name.
	Policy string `json:"policy"`
	// RuleSet is the rule set to run; nil when none is available
	// (Unavailable says why).
	RuleSet *TableRuleSet `json:"ruleSet,omitempty"`
	// Unavailable says why the rule set cannot be run; the data plane then
	// answers 503 unless FailOpen.
	Unavailable string `json:"unavailable,omitempty"`
	FailOpen    bool   `json:"failOpen,omitempty"`
	// Exclusions are a RuleSetOverride's changes on top of the rule set.
	Exclusions *Exclusions `json:"exclusions,omitempty"`
	// SecurityLogs are where the data plane writes matched requests.
	SecurityLogs []SecurityLog `json:"securityLogs,omitempty"`
}

// TableRuleSet is a rule set revision in this cache.
type TableRuleSet struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UUID      string `json:"uuid"`
}

// Exclusions are rules switched off and the CRS inbound anomaly threshold
// changed, as a permitted RuleSetOverride asks.
type Exclusions struct {
	RuleIDs                 []int64  `json:"ruleIDs,omitempty"`
	Tags                    []string `json:"tags,omitempty"`
	InboundAnomalyThreshold int32    `json:"inboundAnomalyThreshold,omitempty"`
}

// SecurityLog is one destination of the data plane's security log.
type SecurityLog struct {
	Name   string `json:"name"`
	Type   string `json:"type"`
	Path   string `json:"path,omitempty"`
	Server string `json:"server,omitempty"`
	// Protocol is the syslog transport: TCP ("" too) or UDP.
	Protocol string `json:"protocol,omitempty"`
}

// TableRow is one match of one route rule.
type TableRow struct {
	// Route is Kind/namespace/name.
	Route string `json:"route"`
	// Hostnames the route accepts; empty means any.
	Hostnames []string `json:"hostnames,omitempty"`
	// Path is the path match; nil matches every path.
	Path *StringMatch `json:"path,omitempty"`
	// Method, when set, is the HTTP method the request must have.
	Method  string        `json:"method,omitempty"`
	Headers []StringMatch `json:"headers,omitempty"`
	Query   []StringMatch `json:"query,omitempty"`
	// Policy is the index in Table.Policies of the policy the match runs;
	// -1 when no policy applies to the route: the data plane runs its own
	// default rule set (an Engine's), or no WAF without one.
	Policy int `json:"policy"`
}

// StringMatch is a path, header or query parameter match as Gateway API
// writes it: Type Exact, PathPrefix (paths) or RegularExpression.
type StringMatch struct {
	Type  string `json:"type"`
	Name  string `json:"name,omitempty"`
	Value string `json:"value"`
}

// TableLatest is what `GET /tables/{namespace}/{gateway}/latest` returns:
// the table's id and the sha256 of the body `GET /tables/{namespace}/{gateway}`
// answers.
type TableLatest struct {
	UUID   string `json:"uuid"`
	SHA256 string `json:"sha256"`
}

type tableRev struct {
	body, latest []byte
	// refs are the rule set keys the table's policies run.
	refs map[string]bool
}

// tables holds the route table of each Gateway.
type tables struct {
	mu sync.RWMutex
	m  map[string]*tableRev
}

// PutTable makes t the table of Gateway namespace/name and reports
// whether it changed. A table above MaxTableRows, MaxTablePolicies or
// MaxTableBytes is refused with ErrTableTooLarge, before it is encoded,
// and the one in force stays.
func (c *Cache) PutTable(namespace, name string, t *Table) (changed bool, err error) {
	if len(t.Rows) > MaxTableRows {
		return false, fmt.Errorf("%w: %d rows, at most %d", ErrTableTooLarge, len(t.Rows), MaxTableRows)
	}
	if len(t.Policies) > MaxTablePolicies {
		return false, fmt.Errorf("%w: %d policies, at most %d", ErrTableTooLarge, len(t.Policies), MaxTablePolicies)
	}
	if n := t.EncodedSize(); n > MaxTableBytes {
		return false, fmt.Errorf("%w: %d bytes, at most %d", ErrTableTooLarge, n, MaxTableBytes)
	}
	body, err := json.Marshal(t)
	if err != nil {
		return false, fmt.Errorf("encode route table %s: %w", Key(namespace, name), err)
	}
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	latest, _ := json.Marshal(TableLatest{UUID: digest[:32], SHA256: digest})
	refs := map[string]bool{}
	for _, p := range t.Policies {
		if p.RuleSet != nil {
			refs[Key(p.RuleSet.Namespace, p.RuleSet.Name)] = true
		}
	}
	c.tables.mu.Lock()
	defer c.tables.mu.Unlock()
	if c.tables.m == nil {
		c.tables.m = map[string]*tableRev{}
	}
	key := Key(namespace, name)
	if old, ok := c.tables.m[key]; ok && string(old.latest) == string(latest) {
		return false, nil
	}
	c.tables.m[key] = &tableRev{body: body, latest: latest, refs: refs}
	return true, nil
}

// DeleteTable removes the table of a Gateway that is gone.
func (c *Cache) DeleteTable(namespace, name string) {
	c.tables.mu.Lock()
	defer c.tables.mu.Unlock()
	delete(c.tables.m, Key(namespace, name))
}

// GetTable returns the table of a Gateway.
func (c *Cache) GetTable(namespace, name string) (*Table, bool) {
	r := c.table(Key(namespace, name))
	if r == nil {
		return nil, false
	}
	var t Table
	_ = json.Unmarshal(r.body, &t)
	return &t, true
}

// TableKeys returns the Gateways that have a table, sorted.
func (c *Cache) TableKeys() []string {
	c.tables.mu.RLock()
	defer c.tables.mu.RUnlock()
	return slices.Sorted(maps.Keys(c.tables.m))
}

func (c *Cache) table(key string) *tableRev {
	c.tables.mu.RLock()
	defer c.tables.mu.RUnlock()
	return c.tables.m[key]
}

// ReferencedFrom reports whether a table of a Gateway in namespace ns runs
// rule set key: then a data plane of that namespace may read it, since the
// policy that put it there was allowed to (same namespace or a
// ReferenceGrant).
func (c *Cache) ReferencedFrom(ns, key string) bool {
	c.tables.mu.RLock()
	defer c.tables.mu.RUnlock()
	for gw, t := range c.tables.m {
		if strings.HasPrefix(gw, ns+"/") && t.refs[key] {
			return true
		}
	}
	return false
}
