package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The words layers share: defined once here, so a change reaches every
// layer that uses them.

// SystemNamespaces returns the namespaces Kubernetes itself owns:
// admission always excludes them (a broken rule or a dead Portal must never
// block what repairs the cluster), NetworkPolicy analysis leaves them out
// by default (their policies are the platform's), and destructive actions
// never act in them. A new slice each call: callers append Portal's own.
func SystemNamespaces() []string {
	return []string{"kube-system", "kube-public", "kube-node-lease"}
}

// TenantKeyPrefix is the only label and annotation key prefix a namespaced
// rule's actions may set: its author may not be allowed to relabel pods, and
// a label decides which Services and NetworkPolicies select a pod. The rule
// loader refuses other keys; the action engine checks again.
const TenantKeyPrefix = "portal.io/"

// ParseRateLimit reads an action's rate limit, COUNT/UNIT with UNIT s, min
// or h ("5/min"): the rule loader checks it with this and the action engine
// enforces what it returns. COUNT has at most six digits.
func ParseRateLimit(s string) (count int, per time.Duration, err error) {
	n, unit, ok := strings.Cut(s, "/")
	count, err = strconv.Atoi(n)
	if !ok || err != nil || count < 0 || len(n) > 6 {
		return 0, 0, fmt.Errorf("rate limit %q: write COUNT/UNIT with UNIT s, min or h, e.g. 5/min", s)
	}
	per = map[string]time.Duration{"s": time.Second, "min": time.Minute, "h": time.Hour}[unit]
	if per == 0 {
		return 0, 0, fmt.Errorf("rate limit %q: unit %q is not one of s, min, h", s, unit)
	}
	return count, per, nil
}
