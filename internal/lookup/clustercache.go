package lookup

import (
	"context"
	"fmt"
	"sync"
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
// its informers, and watches that acquire them. Reads through a watch it
// holds decode each compact object once and share the result between
// evaluations (rules never modify what they read), so a rule listing 5,000
// objects does not inflate 5,000 objects per admission request.
type SharedCache struct {
	FromReader
	c *clustercache.Cache

	mu      sync.Mutex
	handles map[clustercache.Scope]*clustercache.Handle
	decoded map[*clustercache.Object]map[string]any
	// weight is what decoded holds, in compact bytes.
	weight int
}

// The decoded objects kept are bounded in number and in the compact bytes
// they came from (decoded, an object takes tens of times that): past either
// bound they are dropped and refilled by the next reads.
const (
	maxDecoded       = 10_000
	maxDecodedWeight = 2 << 20
)

// NewSharedCache adapts c.
func NewSharedCache(c *clustercache.Cache) *SharedCache {
	return &SharedCache{FromReader: FromReader{R: c}, c: c, handles: map[clustercache.Scope]*clustercache.Handle{}, decoded: map[*clustercache.Object]map[string]any{}}
}

// handle returns a synced handle of this adapter covering namespace of gvr.
func (s *SharedCache) handle(gvr schema.GroupVersionResource, namespace string) *clustercache.Handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handles[clustercache.Scope{Resource: gvr}]
	if h == nil && namespace != "" {
		h = s.handles[clustercache.Scope{Resource: gvr, Namespace: namespace}]
	}
	if h == nil || !h.HasSynced() {
		return nil
	}
	return h
}

func (s *SharedCache) decode(o *clustercache.Object) (map[string]any, error) {
	s.mu.Lock()
	m, ok := s.decoded[o]
	s.mu.Unlock()
	if ok {
		return m, nil
	}
	u, err := o.Decode()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.weight+o.Size() > maxDecodedWeight || len(s.decoded) >= maxDecoded {
		clear(s.decoded)
		s.weight = 0
	}
	s.decoded[o] = u.Object
	s.weight += o.Size()
	s.mu.Unlock()
	return u.Object, nil
}

// Get implements Reader.
func (s *SharedCache) Get(gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error) {
	h := s.handle(gvr, namespace)
	if h == nil {
		return s.FromReader.Get(gvr, namespace, name)
	}
	o, ok := h.Object(namespace, name)
	if !ok {
		return nil, nil
	}
	return s.decode(o)
}

// List implements Reader.
func (s *SharedCache) List(gvr schema.GroupVersionResource, namespace string, sel labels.Selector) ([]map[string]any, error) {
	h := s.handle(gvr, namespace)
	if h == nil {
		return s.FromReader.List(gvr, namespace, sel)
	}
	objs := h.Objects(namespace, sel)
	out := make([]map[string]any, 0, len(objs))
	for _, o := range objs {
		m, err := s.decode(o)
		if err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", gvr.GroupResource(), o.Key(), err)
		}
		out = append(out, m)
	}
	return out, nil
}

// Watch implements Cache: it acquires the informer of gvr in namespace and
// subscribes to its changes. Resyncs are not changes and are not passed on.
func (s *SharedCache) Watch(ctx context.Context, gvr schema.GroupVersionResource, namespace string, fn func(ns, name string, old, new labels.Labels), synced func()) (func(), error) {
	scope := clustercache.Scope{Resource: gvr, Namespace: namespace}
	h, err := s.c.Acquire(scope)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", gvr.GroupResource(), err)
	}
	s.mu.Lock()
	s.handles[scope] = h
	s.mu.Unlock()
	unregister := func() {
		s.mu.Lock()
		if s.handles[scope] == h {
			delete(s.handles, scope)
		}
		s.mu.Unlock()
		h.Release()
	}
	_, err = h.Subscribe(func(e clustercache.Event) {
		if e.Resync || e.Relist {
			return
		}
		fn(e.Key.Namespace, e.Key.Name, labelSet(e.Old), labelSet(e.New))
	}, clustercache.SubscribeOptions{})
	if err != nil {
		unregister()
		return nil, err
	}
	if synced != nil {
		ctx, cancel := context.WithCancel(ctx)
		go func() {
			if h.WaitSynced(ctx, syncWait) == nil {
				synced()
			}
		}()
		return func() { cancel(); unregister() }, nil
	}
	return unregister, nil
}

func labelSet(o *clustercache.Object) labels.Labels {
	if o == nil {
		return nil
	}
	return o.Labels()
}
