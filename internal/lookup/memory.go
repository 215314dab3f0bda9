package lookup

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Memory is a fixed set of objects that answers lookups without a cluster:
// `portal eval` over manifests, the cookbook's tests, benchmarks. It is a
// Reader, a Resolver and a Cache whose watches never fire. Resources
// resolve from the built-in kinds and from the CustomResourceDefinitions
// among the objects.
type Memory struct {
	mu        sync.RWMutex
	resources map[string]Resource // plural and plural.group
	byGVK     map[schema.GroupVersionKind]Resource
	objs      map[schema.GroupVersionResource]map[string][]map[string]any // gvr -> namespace -> objects
}

// clusterScoped are the built-in kinds that live outside namespaces.
var clusterScoped = map[string]bool{
	"Namespace": true, "Node": true, "PersistentVolume": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"StorageClass": true, "CustomResourceDefinition": true, "PriorityClass": true, "IngressClass": true,
	"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true, "ValidatingAdmissionPolicy": true,
	"ValidatingAdmissionPolicyBinding": true, "MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
	"RuntimeClass": true, "CSIDriver": true, "CSINode": true, "VolumeAttachment": true, "APIService": true,
	"CertificateSigningRequest": true, "FlowSchema": true, "PriorityLevelConfiguration": true, "ComponentStatus": true,
	"TokenReview": true, "SelfSubjectReview": true, "SubjectAccessReview": true, "SelfSubjectAccessReview": true,
	"SelfSubjectRulesReview": true, "ClusterTrustBundle": true, "DeviceClass": true, "ResourceSlice": true,
	"IPAddress": true, "ServiceCIDR": true, "PortalClusterRule": true,
}

// NewMemory returns the objects as a cluster. CustomResourceDefinitions
// among them make their resources resolvable.
func NewMemory(objs []*unstructured.Unstructured) (*Memory, error) {
	m := &Memory{resources: map[string]Resource{}, byGVK: map[schema.GroupVersionKind]Resource{}, objs: map[schema.GroupVersionResource]map[string][]map[string]any{}}
	for gvk := range clientgoscheme.Scheme.AllKnownTypes() {
		if gvk.Version == "__internal" || strings.HasSuffix(gvk.Kind, "List") || strings.HasSuffix(gvk.Kind, "Options") {
			continue
		}
		gvr, _ := meta.UnsafeGuessKindToResource(gvk)
		m.add(gvk, Resource{GVR: gvr, Namespaced: !clusterScoped[gvk.Kind]})
	}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		for _, v := range versions {
			name, _ := v.(map[string]any)["name"].(string)
			gvk := schema.GroupVersionKind{Group: group, Version: name, Kind: kind}
			m.add(gvk, Resource{GVR: schema.GroupVersionResource{Group: group, Version: name, Resource: plural}, Namespaced: scope != "Cluster"})
		}
	}
	for _, o := range objs {
		if err := m.Put(o); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Memory) add(gvk schema.GroupVersionKind, r Resource) {
	m.byGVK[gvk] = r
	if prev, ok := m.resources[r.GVR.Resource+"."+r.GVR.Group]; !ok || stable(r.GVR.Version) && !stable(prev.GVR.Version) {
		m.resources[r.GVR.Resource+"."+r.GVR.Group] = r
	}
	// The bare plural names the core group's resource, never the
	// deprecated extensions group's, as discovery prefers them.
	if prev, ok := m.resources[r.GVR.Resource]; !ok || groupRank(r.GVR.Group) < groupRank(prev.GVR.Group) ||
		prev.GVR.Group == r.GVR.Group && stable(r.GVR.Version) && !stable(prev.GVR.Version) {
		m.resources[r.GVR.Resource] = r
	}
}

func stable(version string) bool {
	return !strings.Contains(version, "alpha") && !strings.Contains(version, "beta")
}

func groupRank(g string) int {
	switch g {
	case "":
		return 0
	case "extensions":
		return 2
	}
	return 1
}

// Watch implements Cache: the objects never change, so fn is never called.
func (m *Memory) Watch(context.Context, schema.GroupVersionResource, string, func(old, new map[string]any)) (func(), error) {
	return func() {}, nil
}

// Put adds or replaces an object.
func (m *Memory) Put(o *unstructured.Unstructured) error {
	res, err := m.ResourceFor(o.GroupVersionKind())
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	byNS := m.objs[res.GVR]
	if byNS == nil {
		byNS = map[string][]map[string]any{}
		m.objs[res.GVR] = byNS
	}
	ns := o.GetNamespace()
	list := byNS[ns]
	for i, x := range list {
		if nameOf(x) == o.GetName() {
			list[i] = o.Object
			return nil
		}
	}
	byNS[ns] = append(list, o.Object)
	return nil
}

// Resolve implements Resolver.
func (m *Memory) Resolve(resource string) (Resource, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if r, ok := m.resources[resource]; ok {
		return r, nil
	}
	if r, ok := m.resources[resource+"."]; ok {
		return r, nil
	}
	return Resource{}, fmt.Errorf("resource %q is not known: write the plural resource name (deployments), with its group where needed (widgets.example.com), and include the CustomResourceDefinition of a custom resource", resource)
}

// ResourceFor implements Resolver.
func (m *Memory) ResourceFor(gvk schema.GroupVersionKind) (Resource, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if r, ok := m.byGVK[gvk]; ok {
		return r, nil
	}
	return Resource{}, fmt.Errorf("kind %s is not known: include its CustomResourceDefinition", gvk)
}

// Get implements Reader. The version of gvr is ignored: the objects are
// stored as written.
func (m *Memory) Get(gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, o := range m.objs[m.stored(gvr)][namespace] {
		if nameOf(o) == name {
			return o, nil
		}
	}
	return nil, nil
}

// List implements Reader.
func (m *Memory) List(gvr schema.GroupVersionResource, namespace string, sel labels.Selector) ([]map[string]any, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []map[string]any
	for ns, objs := range m.objs[m.stored(gvr)] {
		if namespace != "" && ns != namespace {
			continue
		}
		for _, o := range objs {
			if sel.Matches(labelsOf(o)) {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// stored finds the stored version of gvr's group and resource.
func (m *Memory) stored(gvr schema.GroupVersionResource) schema.GroupVersionResource {
	if _, ok := m.objs[gvr]; ok {
		return gvr
	}
	for k := range m.objs {
		if k.Group == gvr.Group && k.Resource == gvr.Resource {
			return k
		}
	}
	return gvr
}
