package clustercache

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// Handle is one consumer's hold on an informer. Its reads come from the
// informer's store, never the API server. Release it when done; a released
// handle's subscriptions are removed.
type Handle struct {
	c   *Cache
	inf *informer

	mu       sync.Mutex
	released bool
	subs     []*Subscription
}

// Scope is what the handle watches.
func (h *Handle) Scope() Scope { return h.inf.scope }

// Resource is the watched resource, with its kind and scope.
func (h *Handle) Resource() Resource { return h.inf.resource }

// Release gives the handle back; the informer stops when no handle is left.
// It is safe to call more than once.
func (h *Handle) Release() {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return
	}
	h.released = true
	subs := h.subs
	h.subs = nil
	h.mu.Unlock()
	for _, s := range subs {
		s.close()
	}
	h.c.release(h.inf)
}

// HasSynced reports whether the informer has listed its objects.
func (h *Handle) HasSynced() bool { return h.inf.inf.HasSynced() }

// Err is the last list or watch error of an informer that has not synced
// (RBAC forbids the resource, the API server no longer serves it), else nil.
func (h *Handle) Err() error { return h.inf.err() }

// WaitSynced waits until the informer has listed its objects, ctx ends or
// timeout passes. When it has not synced it returns an error wrapping
// ErrNotSynced and, when known, the reason (a Forbidden API error for a
// resource Portal may not watch).
func (h *Handle) WaitSynced(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if cache.WaitForCacheSync(ctx.Done(), h.inf.inf.HasSynced) {
		return nil
	}
	return h.notSynced()
}

func (h *Handle) notSynced() error {
	if err := h.inf.err(); err != nil {
		return fmt.Errorf("%s: %w: %w", h.inf.scope, ErrNotSynced, err)
	}
	return fmt.Errorf("%s: %w", h.inf.scope, ErrNotSynced)
}

// Object returns the compact cached object, or false when there is none.
func (h *Handle) Object(namespace, name string) (*Object, bool) {
	item, ok, err := h.inf.inf.GetStore().GetByKey(Key{Namespace: namespace, Name: name}.String())
	if err != nil || !ok {
		return nil, false
	}
	o, ok := item.(*Object)
	return o, ok
}

// Get decodes the cached object namespace/name (namespace empty for a
// cluster-scoped one); false when it is not cached. It fails when the
// informer has not synced, since the object may exist all the same.
func (h *Handle) Get(namespace, name string) (*unstructured.Unstructured, bool, error) {
	if !h.HasSynced() {
		return nil, false, h.notSynced()
	}
	o, ok := h.Object(namespace, name)
	if !ok {
		return nil, false, nil
	}
	u, err := o.Decode()
	return u, err == nil, err
}

// Objects returns the compact cached objects in namespace (empty: all the
// handle's scope holds) whose labels sel matches (nil: all), sorted by
// namespace and name.
func (h *Handle) Objects(namespace string, sel labels.Selector) []*Object {
	var items []any
	switch {
	case namespace == "":
		items = h.inf.inf.GetStore().List()
	case h.inf.scope.Namespace != "" && namespace != h.inf.scope.Namespace:
		return nil
	default:
		var err error
		if items, err = h.inf.inf.GetIndexer().ByIndex(cache.NamespaceIndex, namespace); err != nil {
			return nil
		}
	}
	if sel != nil && sel.Empty() {
		sel = nil
	}
	out := make([]*Object, 0, len(items))
	var ref labelsRef
	for _, it := range items {
		o, ok := it.(*Object)
		if !ok || (sel != nil && !sel.Matches(o.labelsIn(&ref))) {
			continue
		}
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b *Object) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Each calls fn with the compact cached objects in namespace (empty: all
// the handle's scope holds), in no order, until fn returns false. Unlike
// Objects it builds no list: a consumer that looks for one match (does any
// pod match this selector?) stops at the first.
func (h *Handle) Each(namespace string, fn func(*Object) bool) {
	var items []any
	switch {
	case namespace == "":
		items = h.inf.inf.GetStore().List()
	case h.inf.scope.Namespace != "" && namespace != h.inf.scope.Namespace:
		return
	default:
		var err error
		if items, err = h.inf.inf.GetIndexer().ByIndex(cache.NamespaceIndex, namespace); err != nil {
			return
		}
	}
	for _, it := range items {
		if o, ok := it.(*Object); ok && !fn(o) {
			return
		}
	}
}

// EachLabels is Each for a caller that reads only each object's name and
// labels (a selector's match): fn's labels are valid during the call only,
// one view of every object's flat labels in turn, where Object.Labels puts
// each object's in an interface of its own.
func (h *Handle) EachLabels(namespace string, fn func(o *Object, l labels.Labels) bool) {
	var ref labelsRef
	h.Each(namespace, func(o *Object) bool { return fn(o, o.labelsIn(&ref)) })
}

// List decodes the objects Objects returns. It fails when the informer has
// not synced, since objects may be missing.
func (h *Handle) List(namespace string, sel labels.Selector) ([]*unstructured.Unstructured, error) {
	if !h.HasSynced() {
		return nil, h.notSynced()
	}
	return decodeAll(h.Objects(namespace, sel))
}

func decodeAll(objs []*Object) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		u, err := o.Decode()
		if err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

// Keys lists the namespace/name keys of the cached objects.
func (h *Handle) Keys() []Key {
	keys := h.inf.inf.GetStore().ListKeys()
	out := make([]Key, 0, len(keys))
	for _, k := range keys {
		ns, name, err := cache.SplitMetaNamespaceKey(k)
		if err == nil {
			out = append(out, Key{Namespace: ns, Name: name})
		}
	}
	return out
}

// EventType is what happened to an object.
type EventType string

// Event types.
const (
	Added   EventType = "add"
	Updated EventType = "update"
	Deleted EventType = "delete"
)

// Event is one change a subscriber sees.
type Event struct {
	Type EventType
	Key  Key
	// Old is the object before an update, and the last state known of a
	// deleted one (nil when a missed delete left none).
	Old *Object
	// New is the object after an add or update.
	New *Object
	// InitialList marks the adds of the informer's initial list, which a
	// subscriber that joins later also receives.
	InitialList bool
	// Resync marks an update of the periodic resync: Old is New.
	Resync bool
	// Relist marks an update from a list after a broken watch that found
	// the object unchanged (same resourceVersion).
	Relist bool
}

// Handler receives events on the subscriber's own goroutine, in order. It
// may take its time (the informer queues for it, without bound) but must
// not keep the object past the call unless it treats it as read-only.
type Handler func(Event)

// SubscribeOptions configure a subscription.
type SubscribeOptions struct {
	// ResyncPeriod, when positive, hands the subscriber every cached object
	// again this often (Event.Resync), rounded up to the cache's
	// ResyncPeriod.
	ResyncPeriod time.Duration
}

// Subscription is one registered handler.
type Subscription struct {
	inf  *informer
	reg  cache.ResourceEventHandlerRegistration
	once sync.Once
}

// HasSynced reports whether the subscriber has received the adds of the
// informer's initial list.
func (s *Subscription) HasSynced() bool { return s.reg.HasSynced() }

// WaitSynced is HasSynced with a deadline, as Handle.WaitSynced.
func (s *Subscription) WaitSynced(ctx context.Context, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cache.WaitForCacheSync(ctx.Done(), s.reg.HasSynced)
}

// Unsubscribe ends the subscription; the handle's Release does it too. An
// event being handled when it is called may still finish.
func (s *Subscription) Unsubscribe() { s.close() }

func (s *Subscription) close() {
	s.once.Do(func() { _ = s.inf.inf.RemoveEventHandler(s.reg) })
}

// Subscribe registers fn for the events of the handle's informer; a
// subscriber that joins after the initial list receives its adds first. Each
// subscriber has its own queue and goroutine, so a slow handler never delays
// the informer or the other subscribers. The subscription ends with the
// handle's Release.
func (h *Handle) Subscribe(fn Handler, o SubscribeOptions) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return nil, fmt.Errorf("subscribe to %s: handle released", h.inf.scope)
	}
	resync := max(o.ResyncPeriod, 0)
	reg, err := h.inf.inf.AddEventHandlerWithOptions(handlerFuncs(fn), cache.HandlerOptions{ResyncPeriod: &resync})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", h.inf.scope, err)
	}
	s := &Subscription{inf: h.inf, reg: reg}
	h.subs = append(h.subs, s)
	return s, nil
}

// handlerFuncs adapts fn to client-go's handler interface.
func handlerFuncs(fn Handler) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			o, ok := obj.(*Object)
			if !ok {
				return
			}
			fn(Event{Type: Added, Key: o.Key(), New: o, InitialList: initial})
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*Object)
			n, ok2 := newObj.(*Object)
			if !ok1 || !ok2 {
				return
			}
			fn(Event{Type: Updated, Key: n.Key(), Old: o, New: n, Resync: o == n, Relist: o != n && sameVersion(o, n)})
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				ns, name, err := cache.SplitMetaNamespaceKey(tomb.Key)
				if err != nil {
					return
				}
				last, _ := tomb.Obj.(*Object)
				fn(Event{Type: Deleted, Key: Key{Namespace: ns, Name: name}, Old: last})
				return
			}
			if o, ok := obj.(*Object); ok {
				fn(Event{Type: Deleted, Key: o.Key(), Old: o})
			}
		},
	}
}

func sameVersion(a, b metav1.Object) bool {
	return a.GetResourceVersion() == b.GetResourceVersion()
}
