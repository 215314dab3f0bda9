package lookup

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/vilaca/portal/internal/core"
)

// view answers the lookups of one rule's evaluation of one object; it
// implements exprlang.Cluster.
type view struct {
	l    *Lookups
	rule *core.Rule
	// namespace confines the reads of a namespaced rule; "" for a
	// cluster-wide rule.
	namespace string

	admission bool
	overlay   *overlay

	record bool
	dep    Dependent
}

// scope resolves resource and checks that the rule may read namespace ns
// of it, returning the namespace to read.
func (v *view) scope(resource, ns string) (Resource, string, error) {
	res, err := v.l.o.Resolver.Resolve(resource)
	if err != nil {
		return res, "", err
	}
	if v.namespace != "" && res.GVR.Group == "" && res.GVR.Resource == "secrets" {
		// A tenant who may create a PortalRule need not be allowed to read
		// its namespace's Secrets; a rule's message would hand them over.
		return res, "", fmt.Errorf("%w: PortalRule %s/%s may not read secrets (a PortalClusterRule may)", ErrOtherNamespace, v.namespace, v.rule.Name)
	}
	if !res.Namespaced {
		if v.namespace != "" {
			return res, "", fmt.Errorf("%w: %s is cluster-scoped, and PortalRule %s/%s reads only namespace %q (a PortalClusterRule may read it)",
				ErrOtherNamespace, resource, v.namespace, v.rule.Name, v.namespace)
		}
		return res, "", nil
	}
	switch {
	case v.namespace == "":
		return res, ns, nil
	case ns == "" || ns == v.namespace:
		return res, v.namespace, nil
	}
	return res, "", fmt.Errorf("%w: PortalRule %s/%s read namespace %q; it may read only %q (a PortalClusterRule may read any)",
		ErrOtherNamespace, v.namespace, v.rule.Name, ns, v.namespace)
}

// ByName implements exprlang.Cluster.
func (v *view) ByName(ctx context.Context, resource string, consistent bool, ns, name string) (map[string]any, error) {
	res, ns, err := v.scope(resource, ns)
	if err != nil {
		return nil, err
	}
	if v.record {
		v.l.o.Index.Add(v.dep, Read{GVR: res.GVR, Namespace: ns, Name: name})
	}
	if o := v.overlay; o != nil && o.res == res.GVR && o.namespace == ns && o.name == name && name != "" {
		return o.obj, nil
	}
	if consistent && v.admission && v.l.o.API != nil {
		return v.l.o.API.Get(ctx, res.GVR, ns, name)
	}
	return v.l.o.Cache.Get(res.GVR, ns, name)
}

// List implements exprlang.Cluster.
func (v *view) List(ctx context.Context, resource string, consistent bool, ns string, sel labels.Selector, budget core.ReadBudget) ([]any, error) {
	res, ns, err := v.scope(resource, ns)
	if err != nil {
		return nil, err
	}
	if v.record {
		v.l.o.Index.Add(v.dep, Read{GVR: res.GVR, Namespace: ns, Selector: sel})
	}
	var items []map[string]any
	if consistent && v.admission && v.l.o.API != nil {
		items, err = v.l.o.API.List(ctx, res.GVR, ns, sel, budget)
	} else {
		items, err = v.l.o.Cache.List(res.GVR, ns, sel)
	}
	if err != nil {
		return nil, err
	}
	o := v.overlay
	if o == nil || o.res != res.GVR || (ns != "" && o.namespace != ns) {
		return toAny(items), nil
	}
	// The inbound object replaces what the cache has of it, or hides it
	// when it is being deleted.
	out := make([]any, 0, len(items)+1)
	for _, it := range items {
		if o.name != "" && nameOf(it) == o.name && namespaceOf(it) == o.namespace {
			continue
		}
		out = append(out, it)
	}
	if o.obj != nil && sel.Matches(labelsOf(o.obj)) {
		out = append(out, o.obj)
	}
	return out, nil
}

func toAny(items []map[string]any) []any {
	out := make([]any, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out
}

func metadata(obj map[string]any) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	return md
}

func nameOf(obj map[string]any) string {
	s, _ := metadata(obj)["name"].(string)
	return s
}

func namespaceOf(obj map[string]any) string {
	s, _ := metadata(obj)["namespace"].(string)
	return s
}

func labelsOf(obj map[string]any) labels.Set {
	l, _ := metadata(obj)["labels"].(map[string]any)
	set := make(labels.Set, len(l))
	for k, v := range l {
		if s, ok := v.(string); ok {
			set[k] = s
		}
	}
	return set
}
