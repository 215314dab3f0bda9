package binding

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// attachment is where a route attaches, by Gateway API's rules: the
// Gateways (in parentRefs order) and, per Gateway, the hostnames it
// serves there ("" alone: any host).
type attachment struct {
	parents []objKey
	hosts   map[objKey][]string
}

// attachRoute attaches a route of kind in namespace ns, with hostnames
// (lower case), through its parentRefs: a parentRef selects the listeners
// of its Gateway it names (sectionName, port; all when unset), a listener
// takes the route when its allowedRoutes admit the route's namespace and
// kind and its hostname intersects the route's, and the route serves, on
// that Gateway, the union of those intersections. A Gateway none of whose
// listeners take the route is not a parent: the route neither gets that
// Gateway's protection nor a row in its table, so a route of another
// namespace cannot change what a Gateway runs unless the Gateway lets it.
func attachRoute(kind, ns string, hostnames []string, refs []gatewayv1.ParentReference, gateways map[objKey]*gatewayv1.Gateway, nsLabels map[string]map[string]string) attachment {
	a := attachment{hosts: map[objKey][]string{}}
	for _, ref := range refs {
		if (ref.Group != nil && string(*ref.Group) != gatewayv1.GroupName) || (ref.Kind != nil && string(*ref.Kind) != KindGateway) {
			continue
		}
		gns := ns
		if ref.Namespace != nil {
			gns = string(*ref.Namespace)
		}
		k := objKey{KindGateway, gns, string(ref.Name)}
		g, ok := gateways[k]
		if !ok {
			continue
		}
		for _, l := range g.Spec.Listeners {
			if (ref.SectionName != nil && l.Name != *ref.SectionName) || (ref.Port != nil && l.Port != *ref.Port) {
				continue
			}
			if !allowsNamespace(g, l, ns, nsLabels) || !allowsKind(l, kind) {
				continue
			}
			hs, ok := intersectHostnames(l.Hostname, hostnames)
			if !ok {
				continue
			}
			if !slices.Contains(a.parents, k) {
				a.parents = append(a.parents, k)
			}
			for _, h := range hs {
				if !slices.Contains(a.hosts[k], h) {
					a.hosts[k] = append(a.hosts[k], h)
				}
			}
		}
	}
	return a
}

// allowsNamespace: allowedRoutes.namespaces of l admits routes of ns
// (Same when unset; a Selector that does not parse admits none).
func allowsNamespace(g *gatewayv1.Gateway, l gatewayv1.Listener, ns string, nsLabels map[string]map[string]string) bool {
	from := gatewayv1.NamespacesFromSame
	var sel *metav1.LabelSelector
	if l.AllowedRoutes != nil && l.AllowedRoutes.Namespaces != nil {
		if l.AllowedRoutes.Namespaces.From != nil {
			from = *l.AllowedRoutes.Namespaces.From
		}
		sel = l.AllowedRoutes.Namespaces.Selector
	}
	switch from {
	case gatewayv1.NamespacesFromAll:
		return true
	case gatewayv1.NamespacesFromSame:
		return ns == g.Namespace
	case gatewayv1.NamespacesFromSelector:
		if sel == nil {
			return false
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		return err == nil && s.Matches(labels.Set(nsLabels[ns]))
	}
	return false
}

// allowsKind: allowedRoutes.kinds of l names kind, or, when it names none,
// l's protocol carries it (HTTP and HTTPS carry HTTPRoutes and
// GRPCRoutes; TLS, TCP and UDP listeners carry neither).
func allowsKind(l gatewayv1.Listener, kind string) bool {
	if l.AllowedRoutes != nil && len(l.AllowedRoutes.Kinds) > 0 {
		return slices.ContainsFunc(l.AllowedRoutes.Kinds, func(k gatewayv1.RouteGroupKind) bool {
			return (k.Group == nil || string(*k.Group) == gatewayv1.GroupName) && string(k.Kind) == kind
		})
	}
	switch l.Protocol {
	case gatewayv1.HTTPProtocolType, gatewayv1.HTTPSProtocolType:
		return kind == KindHTTPRoute || kind == KindGRPCRoute
	}
	return false
}

// intersectHostnames returns the hostnames a route with hostnames serves
// on a listener with hostname lh: the route's when the listener has none,
// the listener's when the route has none, else each intersecting pair's
// more specific name. ok is false when both have hostnames and none
// intersect: the listener does not take the route.
func intersectHostnames(lh *gatewayv1.Hostname, hostnames []string) ([]string, bool) {
	switch {
	case (lh == nil || *lh == "") && len(hostnames) == 0:
		return []string{""}, true
	case lh == nil || *lh == "":
		return hostnames, true
	case len(hostnames) == 0:
		return []string{strings.ToLower(string(*lh))}, true
	}
	l := strings.ToLower(string(*lh))
	var out []string
	for _, h := range hostnames {
		if x := intersectHostname(l, h); x != "" && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out, len(out) > 0
}

// intersectHostname returns the more specific of a and b when one covers
// the other, "" when they share no host.
func intersectHostname(a, b string) string {
	switch {
	case a == b:
		return a
	case covers(a, b):
		return b
	case covers(b, a):
		return a
	}
	return ""
}

// covers: wildcard w ("*.example.com") matches h, an exact name or a
// narrower wildcard with at least one more label (foo.example.com,
// *.foo.example.com; not example.com).
func covers(w, h string) bool {
	suffix, ok := strings.CutPrefix(w, "*")
	return ok && strings.HasPrefix(suffix, ".") && strings.HasSuffix(h, suffix)
}
