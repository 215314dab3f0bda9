package apirule

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
)

// JWKSAllow lists the internal hosts an APIRule's jwksUri may name anyway:
// istiod fetches every jwksUri from inside the cluster, so by default a
// tenant may not point it at loopback, link-local (the cloud metadata
// service at 169.254.169.254), private or cluster-internal addresses.
type JWKSAllow struct {
	// Prefixes are address ranges an IP literal may fall in.
	Prefixes []netip.Prefix
	// Hosts are names allowed exactly, or every name under a `*.` suffix;
	// lower case, without a trailing dot.
	Hosts []string
}

// ParseJWKSAllow reads the entries of --apigateway-jwks-allow-internal:
// each a CIDR, an IP address, a host name or `*.` and a domain.
func ParseJWKSAllow(entries []string) (JWKSAllow, error) {
	var a JWKSAllow
	for _, e := range entries {
		e = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(e)), ".")
		if p, err := netip.ParsePrefix(e); err == nil {
			a.Prefixes = append(a.Prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			a.Prefixes = append(a.Prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		wild := strings.HasPrefix(e, "*.")
		if e == "" || e == "*." || strings.ContainsAny(e, "/:@ ") || strings.Contains(strings.TrimPrefix(e, "*."), "*") || (!wild && strings.HasPrefix(e, "*")) {
			return JWKSAllow{}, fmt.Errorf("--apigateway-jwks-allow-internal: %q is not a CIDR, an IP address, a host name or *.<domain>", e)
		}
		a.Hosts = append(a.Hosts, e)
	}
	return a, nil
}

func (a JWKSAllow) allowsHost(h string) bool {
	return slices.ContainsFunc(a.Hosts, func(x string) bool {
		return x == h || (strings.HasPrefix(x, "*.") && strings.HasSuffix(h, x[1:]))
	})
}

func (a JWKSAllow) allowsAddr(ip netip.Addr) bool {
	return slices.ContainsFunc(a.Prefixes, func(p netip.Prefix) bool { return p.Contains(ip) })
}

// ValidateJWKS refuses a jwksUri that names an internal host, unless allow
// lets it. Names are judged as written, never resolved: an answer at
// reconcile time says nothing of the one istiod gets when it fetches (DNS
// rebinding), and validation stays free of I/O and deterministic. So a
// public name whose DNS points inside is not caught; istiod's egress is the
// place to stop that.
func ValidateJWKS(api *gatewayv1alpha1.APIRule, allow JWKSAllow) *Problem {
	for i := range api.Spec.Rules {
		r := &api.Spec.Rules[i]
		jwt, where := r.Jwt, "jwt"
		if jwt == nil && r.ExtAuth != nil {
			jwt, where = r.ExtAuth.Restrictions, "extAuth.restrictions"
		}
		if jwt == nil {
			continue
		}
		for j, a := range jwt.Authentications {
			if why := internalJWKS(a.JwksURI, allow); why != "" {
				return &Problem{Reason: gatewayv1alpha1.ReasonJWKSNotAllowed, Message: fmt.Sprintf(
					"rules[%d].%s.authentications[%d].jwksUri %q %s: istiod fetches it from inside the cluster; use the issuer's public JWKS URL, or ask the cluster's administrators to allow the host (--apigateway-jwks-allow-internal)",
					i, where, j, a.JwksURI, why)}
			}
		}
	}
	return nil
}

// internalJWKS says why uri's host is internal, "" when it is not (or is
// allowed).
func internalJWKS(uri string, allow JWKSAllow) string {
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return "is not an http(s) URL with a host"
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if allow.allowsAddr(ip) {
			return ""
		}
		return internalAddr(ip)
	}
	if allow.allowsHost(host) {
		return ""
	}
	return internalName(host)
}

// Ranges no public JWKS lives in, beyond what netip.Addr's own predicates
// name: shared address space (RFC 6598, often pod or node networks),
// "this network", IETF protocol assignments, benchmarking, reserved.
var internalPrefixes = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// nat64 embeds an IPv4 address in its last four bytes (RFC 6052).
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// internalAddr says which kind of internal address ip is, "" for a public
// one.
func internalAddr(ip netip.Addr) string {
	if nat64.Contains(ip) {
		b := ip.As16()
		return internalAddr(netip.AddrFrom4([4]byte(b[12:])))
	}
	switch {
	case ip.IsLoopback():
		return "names a loopback address"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "names a link-local address (169.254.0.0/16, fe80::/10: the cloud metadata service lives there)"
	case ip.IsPrivate():
		return "names a private address (RFC 1918, fc00::/7)"
	case ip.IsUnspecified():
		return "names the unspecified address"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "names a multicast address"
	}
	for _, p := range internalPrefixes {
		if p.Contains(ip) {
			return "names an address in " + p.String() + ", which is not public"
		}
	}
	return ""
}

// Name suffixes that only resolve inside a cluster or a site: Kubernetes'
// default cluster domain and its service and pod subdomains, mDNS, the
// loopback name, reverse zones and names reserved for private use
// (metadata.google.internal is a cloud metadata service).
var internalSuffixes = []string{"localhost", "local", "internal", "arpa", "svc", "cluster.local", "lan", "home", "corp"}

// Namespaces every cluster has: `<service>.<namespace>` resolves through
// istiod's DNS search path, `kubernetes.default` to the API server.
var clusterNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease", "istio-system"}

// internalName says why a host name is internal, "" when it looks public.
func internalName(host string) string {
	labels := strings.Split(host, ".")
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		// Resolvers read 2130706433, 0177.1 or 0x7f.1 as 127.0.0.1; no
		// top-level domain is numeric.
		return "names an address in a form other than dotted decimal or IPv6"
	}
	if len(labels) >= 3 && slices.Contains(labels[2:], "svc") {
		// <service>.<namespace>.svc under any cluster domain.
		return "names a Service of the cluster (<service>.<namespace>.svc)"
	}
	for _, s := range internalSuffixes {
		if host == s || strings.HasSuffix(host, "."+s) {
			return "names a host under ." + s + ", which only resolves inside the cluster or the site"
		}
	}
	switch {
	case len(labels) == 1:
		return "names a host without a domain, which resolves through istiod's DNS search path to a Service of the cluster"
	case len(labels) == 2 && slices.Contains(clusterNamespaces, last):
		return "names a Service of namespace " + last + " (istiod's DNS search path completes it)"
	}
	return ""
}
