package apirule

import "strings"

// hostsOverlap reports whether some request host is served under both a
// and b, as Istio matches a VirtualService's hosts (host.Name.Matches in
// istio.io/istio pkg/config/host) and Envoy a virtual host's domains: a host
// that starts with `*` matches every name that ends in the rest of it and
// is longer, so `*.example.com` matches `a.example.com` and also
// `a.b.example.com` (any number of labels), never `example.com`; `*` matches
// every name. Two wildcards overlap when one's suffix ends the other's.
// Both are lower case.
//
// Overlap is what decides who serves a request: Envoy picks an exact domain
// over a wildcard, and the longer wildcard over the shorter, so a newer
// `shop.example.com` (or `*.shop.example.com`) would take requests an older
// `*.example.com` serves. Hosts that overlap are one claim: the oldest wins.
func hostsOverlap(a, b string) bool {
	wa, wb := strings.HasPrefix(a, "*"), strings.HasPrefix(b, "*")
	switch {
	case wa && wb:
		return strings.HasSuffix(a[1:], b[1:]) || strings.HasSuffix(b[1:], a[1:])
	case wa:
		return len(b) > len(a)-1 && strings.HasSuffix(b, a[1:])
	case wb:
		return len(a) > len(b)-1 && strings.HasSuffix(a, b[1:])
	}
	return a == b
}

// overlapping returns the first of hosts that overlaps h (compared in lower
// case), and whether there is one.
func overlapping(hosts []string, h string) (string, bool) {
	h = strings.ToLower(h)
	for _, x := range hosts {
		if hostsOverlap(x, h) {
			return x, true
		}
	}
	return "", false
}

// collision begins the message for this APIRule's host mine colliding
// with theirs, naming both when they differ, so the author sees which of
// their hosts to change and why a host they never wrote is in the way.
func collision(mine, theirs string) string {
	if mine == theirs {
		return "host " + mine + " is"
	}
	return "host " + mine + " overlaps " + theirs + ", which is"
}
