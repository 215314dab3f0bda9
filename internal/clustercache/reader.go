package clustercache

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Reader is what cross-resource lookups read the cluster through. The
// Cache implements it over its informers (a resource must have been
// acquired, in the namespace read or cluster-wide, and synced); Static over
// manifests, for `portal eval --cluster-state`. Objects returned are the
// caller's to keep and change. Readers do not know who asks: a caller
// serving a namespaced rule (a tenant's PortalRule) passes that rule's
// namespace, never "", so it reads nothing of another namespace.
type Reader interface {
	// Resolve maps a resource as rules name it ("pods",
	// "deployments.apps", "deployments.v1.apps") to a served resource.
	Resolve(resource string) (Resource, error)
	// Get returns the object namespace/name of gvr (namespace empty for a
	// cluster-scoped resource), or false when there is none.
	Get(gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, bool, error)
	// List returns gvr's objects in namespace (empty: every namespace)
	// whose labels sel matches (nil: all), sorted by namespace and name.
	List(gvr schema.GroupVersionResource, namespace string, sel labels.Selector) ([]*unstructured.Unstructured, error)
}

var (
	_ Reader = (*Cache)(nil)
	_ Reader = (*Static)(nil)
)

// Get implements Reader from the informer covering namespace: gvr's
// cluster-wide one, else the one of that namespace. It fails with
// ErrNotWatched when no consumer acquired either, and with ErrNotSynced
// before it has listed.
func (c *Cache) Get(gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, bool, error) {
	inf, err := c.covering(gvr, namespace)
	if err != nil {
		return nil, false, err
	}
	return (&Handle{c: c, inf: inf}).Get(namespace, name)
}

// List implements Reader as Get does; listing every namespace needs the
// cluster-wide informer.
func (c *Cache) List(gvr schema.GroupVersionResource, namespace string, sel labels.Selector) ([]*unstructured.Unstructured, error) {
	inf, err := c.covering(gvr, namespace)
	if err != nil {
		return nil, err
	}
	return (&Handle{c: c, inf: inf}).List(namespace, sel)
}

// resolve maps a resource argument to a served resource with mapper, as
// kubectl does: "deployments.v1.apps" when that version exists, else
// "deployments.apps" or "deployments" at the preferred version.
func resolve(mapper meta.RESTMapper, resource string) (Resource, error) {
	arg := strings.ToLower(strings.TrimSpace(resource))
	if arg == "" {
		return Resource{}, fmt.Errorf("resource %q: empty", resource)
	}
	full, gr := schema.ParseResourceArg(arg)
	var gvr schema.GroupVersionResource
	var err error
	if full != nil {
		gvr, err = mapper.ResourceFor(*full)
	}
	if full == nil || err != nil {
		gvr, err = mapper.ResourceFor(gr.WithVersion(""))
	}
	if err != nil {
		return Resource{}, fmt.Errorf("resource %q is not served: %w", resource, err)
	}
	gvk, err := mapper.KindFor(gvr)
	if err != nil {
		return Resource{}, fmt.Errorf("resource %q: %w", resource, err)
	}
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return Resource{}, fmt.Errorf("resource %q: %w", resource, err)
	}
	return Resource{GVR: gvr, GVK: gvk, Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}, nil
}

func sortScopes(s []Scope) {
	slices.SortFunc(s, func(a, b Scope) int {
		return cmp.Or(cmp.Compare(a.Resource.String(), b.Resource.String()), cmp.Compare(a.Namespace, b.Namespace))
	})
}
