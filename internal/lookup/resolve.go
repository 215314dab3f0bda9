package lookup

import (
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// MapperResolver resolves resource names with the API server's discovery
// (a RESTMapper), remembering what it found: lookups run on every
// evaluation, discovery must not.
type MapperResolver struct {
	mapper meta.RESTMapper
	cache  sync.Map // string or GroupVersionKind -> Resource
}

// NewMapperResolver returns a resolver over mapper.
func NewMapperResolver(mapper meta.RESTMapper) *MapperResolver {
	return &MapperResolver{mapper: mapper}
}

// Resolve maps "deployments" or "widgets.example.com" (plural, then the
// group where needed) to the served resource. Failures are not remembered:
// a CRD installed later resolves then.
func (r *MapperResolver) Resolve(resource string) (Resource, error) {
	if v, ok := r.cache.Load(resource); ok {
		return v.(Resource), nil
	}
	gr := schema.ParseGroupResource(resource)
	if gr.Resource != strings.ToLower(gr.Resource) {
		return Resource{}, fmt.Errorf("resource %q: write the plural lowercase resource name (deployments, poddisruptionbudgets), not the kind", resource)
	}
	gvr, err := r.mapper.ResourceFor(gr.WithVersion(""))
	if err != nil {
		return Resource{}, fmt.Errorf("resource %q is not served by the API server (write the plural resource name, with its group where two groups serve it: widgets.example.com): %w", resource, err)
	}
	gvk, err := r.mapper.KindFor(gvr)
	if err != nil {
		return Resource{}, fmt.Errorf("resource %q: %w", resource, err)
	}
	m, err := r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return Resource{}, fmt.Errorf("resource %q: %w", resource, err)
	}
	res := Resource{GVR: m.Resource, Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}
	r.cache.Store(resource, res)
	return res, nil
}

// ResourceFor maps an object's kind to its resource.
func (r *MapperResolver) ResourceFor(gvk schema.GroupVersionKind) (Resource, error) {
	if v, ok := r.cache.Load(gvk); ok {
		return v.(Resource), nil
	}
	m, err := r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return Resource{}, fmt.Errorf("kind %s: %w", gvk, err)
	}
	res := Resource{GVR: m.Resource, Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}
	r.cache.Store(gvk, res)
	return res, nil
}
