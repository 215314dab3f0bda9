package engine

import (
	"path"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
)

// wantsEvent reports whether a runtime rule lists one of the event's
// classes; every event is of class any.
func (r *Rule) wantsEvent(classes []string) bool {
	for _, c := range r.Runtime.Events {
		if c == event.Any || slices.Contains(classes, c) {
			return true
		}
	}
	return false
}

// matchesKindAndNamespace is the part of a match rules and exceptions
// share: obj's kind is one of gvks (an empty version matches every
// version), obj is in owner's namespace when owner is one (a PortalRule's,
// a PortalException's), and its namespace passes ns (a cluster-scoped
// object only an empty include).
func matchesKindAndNamespace(gvks []core.GVK, ns core.NamespaceMatch, owner string, obj *unstructured.Unstructured, gvk schema.GroupVersionKind) bool {
	kindOK := false
	for _, g := range gvks {
		if g.Group == gvk.Group && g.Kind == gvk.Kind && (g.Version == "" || g.Version == gvk.Version) {
			kindOK = true
			break
		}
	}
	if !kindOK {
		return false
	}
	objNS := obj.GetNamespace()
	switch {
	case owner != "" && objNS != owner:
		return false
	case len(ns.Include) > 0 && (objNS == "" || !anyGlob(ns.Include, objNS)):
		return false
	case objNS != "" && anyGlob(ns.Exclude, objNS):
		return false
	}
	return true
}

func (r *Rule) matches(obj *unstructured.Unstructured, gvk schema.GroupVersionKind, m core.Mode) bool {
	if !r.Enabled || (m != "" && !r.HasMode(m)) {
		return false
	}
	if !matchesKindAndNamespace(r.Match.GVKs, r.Match.Namespaces, r.Namespace, obj, gvk) {
		return false
	}
	return r.selector.Empty() || r.selector.Matches(labels.Set(obj.GetLabels()))
}

func anyGlob(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
