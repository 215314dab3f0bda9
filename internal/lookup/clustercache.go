package lookup

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/clustercache"
)

// FromReader reads lookups from a clustercache.Reader: the live cache, or a
// clustercache.Static over manifests for `portal eval --cluster-state`. It
// is a Reader and a Resolver; Static returns a Cache whose watches never
// fire.
type FromReader struct {
	R clustercache.Reader
}

var (
	_ Reader   = FromReader{}
	_ Resolver = FromReader{}
	_ Cache    = (*SharedCache)(nil)
)

// Get implements Reader.
func (f FromReader) Get(gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error) {
	u, ok, err := f.R.Get(gvr, namespace, name)
	if err != nil || !ok {
		return nil, err
	}
	return u.Object, nil
}

// List implements Reader.
func (f FromReader) List(gvr schema.GroupVersionResource, namespace string, sel labels.Selector) ([]map[string]any, error) {
	us, err := f.R.List(gvr, namespace, sel)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]any, len(us))
	for i, u := range us {
		out[i] = u.Object
	}
	return out, nil
}

// Resolve implements Resolver.
func (f FromReader) Resolve(resource string) (Resource, error) {
	r, err := f.R.Resolve(resource)
	if err != nil {
		return Resource{}, err
	}
	return Resource{GVR: r.GVR, Namespaced: r.Namespaced}, nil
}

// ResourceFor implements Resolver: by the reader's own kind resolution when
// it has one, else by the plural kubectl would guess.
func (f FromReader) ResourceFor(gvk schema.GroupVersionKind) (Resource, error) {
	if k, ok := f.R.(interface {
		ResolveKind(schema.GroupVersionKind) (clustercache.Resource, error)
	}); ok {
		r, err := k.ResolveKind(gvk)
		if err != nil {
			return Resource{}, err
		}
		return Resource{GVR: r.GVR, Namespaced: r.Namespaced}, nil
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	name := plural.Resource
	if gvk.Group != "" {
		name += "." + gvk.Group
	}
	return f.Resolve(name)
}

// Static returns f as a Cache for a fixed set of objects: watches succeed
// and never fire.
func (f FromReader) Static() Cache { return staticCache{f} }

type staticCache struct{ FromReader }

func (staticCache) Watch(context.Context, schema.GroupVersionResource, string, func(ns, name string, old, new labels.Labels), func()) (func(), error) {
	return func() {}, nil
}

// syncWait bounds the wait for a watch to list; one that cannot (RBAC) is
// reported in the rule's status instead.
const syncWait = 10 * time.Minute

// SharedCache is the live shared cluster cache as lookups use it: reads from
// its informers, and watches that acquire them.
type SharedCache struct {
	FromReader
	c *clustercache.Cache
}

// NewSharedCache adapts c.
func NewSharedCache(c *clustercache.Cache) *SharedCache {
	return &SharedCache{FromReader: FromReader{R: c}, c: c}
}

// Watch implements Cache: it acquires the informer of gvr in namespace and
// subscribes to its changes. Resyncs are not changes and are not passed on.
func (s *SharedCache) Watch(ctx context.Context, gvr schema.GroupVersionResource, namespace string, fn func(ns, name string, old, new labels.Labels), synced func()) (func(), error) {
	h, err := s.c.Acquire(clustercache.Scope{Resource: gvr, Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", gvr.GroupResource(), err)
	}
	_, err = h.Subscribe(func(e clustercache.Event) {
		if e.Resync || e.Relist {
			return
		}
		fn(e.Key.Namespace, e.Key.Name, labelSet(e.Old), labelSet(e.New))
	}, clustercache.SubscribeOptions{})
	if err != nil {
		h.Release()
		return nil, err
	}
	if synced != nil {
		ctx, cancel := context.WithCancel(ctx)
		go func() {
			if h.WaitSynced(ctx, syncWait) == nil {
				synced()
			}
		}()
		return func() { cancel(); h.Release() }, nil
	}
	return h.Release, nil
}

func labelSet(o *clustercache.Object) labels.Labels {
	if o == nil {
		return nil
	}
	return o.Labels()
}
