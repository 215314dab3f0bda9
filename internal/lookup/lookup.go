// Package lookup gives rules their cluster.* reads: cluster.<resource>.byName
// and cluster.<resource>.list answered from the shared cluster cache, never
// the API server (cluster.consistent.* at admission is the exception), with
// three guarantees around them:
//
//   - confinement: a namespaced rule (PortalRule) reads only its own
//     namespace; a PortalClusterRule reads any;
//   - freshness in audit: every read is recorded in a bounded dependency
//     index, and when an object that was read is added, changed or deleted
//     the objects whose evaluation read it are evaluated again (with a cap
//     per rule and object, so a rule that feeds its own re-evaluation
//     cannot spin);
//   - admission overlay: while an admission request is decided, lookups see
//     the inbound object as it will be (CREATE, UPDATE) or gone (DELETE).
//
// Lookups is the engine's binder for the name `cluster`; Watcher starts the
// informers the rules need and turns cache events into re-evaluations.
package lookup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// Reader reads the shared cluster cache. Objects are returned as their
// unstructured content and must not be modified. A resource that is not
// cached (nobody acquired it, or its informer has not synced) is an error
// wrapping ErrNotCached, never an empty answer.
type Reader interface {
	// Get returns the object, or nil when the cache has none of that name.
	Get(gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error)
	// List returns the objects of namespace ("" for all namespaces, and for
	// cluster-scoped resources) that sel selects.
	List(gvr schema.GroupVersionResource, namespace string, sel labels.Selector) ([]map[string]any, error)
}

// APIReader reads the API server, for cluster.consistent.* at admission.
type APIReader interface {
	Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error)
	// List charges budget for every page it reads and stops, with
	// budget's error, where budget ends.
	List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, sel labels.Selector, budget core.ReadBudget) ([]map[string]any, error)
}

// Resolver maps a resource name as rules write it to the served resource.
type Resolver interface {
	Resolve(resource string) (Resource, error)
	// ResourceFor maps an object's kind to its resource, for the overlay.
	ResourceFor(gvk schema.GroupVersionKind) (Resource, error)
}

// Resource is a served resource.
type Resource struct {
	GVR        schema.GroupVersionResource
	Namespaced bool
}

// Errors a lookup returns, for callers to tell apart.
var (
	// ErrNotCached is a read of a resource the cache does not hold yet.
	ErrNotCached = errors.New("resource not cached yet")
	// ErrOtherNamespace is a namespaced rule reading outside its namespace.
	ErrOtherNamespace = errors.New("a PortalRule's lookups are confined to its own namespace")
)

// Options configure Lookups.
type Options struct {
	// Cache answers every read but cluster.consistent.* at admission.
	Cache Reader
	// API answers cluster.consistent.* at admission; nil makes those reads
	// use Cache too (portal eval, tests without a server).
	API APIReader
	// Resolver maps resource names; required.
	Resolver Resolver
	// Index records audit reads; nil records nothing.
	Index  *DepIndex
	Logger *slog.Logger
}

// Lookups is the engine binder of `cluster`.
type Lookups struct {
	o Options
}

// New returns the binder of `cluster`.
func New(o Options) *Lookups {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Lookups{o: o}
}

// Name implements engine.Binder.
func (*Lookups) Name() string { return "cluster" }

// Cache is the cache the binder reads. The Watcher of the same rules must
// be given this one: reads are served from (and decoded once by) the
// watches it holds.
func (l *Lookups) Cache() Reader { return l.o.Cache }

// Bind implements engine.Binder: the view r's evaluation of obj reads
// through. In audit, the rule's earlier reads of obj are forgotten here and
// its new ones recorded as it reads; in runtime, nothing is recorded.
func (l *Lookups) Bind(_ context.Context, r *engine.Rule, obj *unstructured.Unstructured, opts engine.Options) any {
	v := &view{l: l, namespace: r.Namespace, rule: r.Rule}
	switch {
	case opts.Mode == core.ModeAdmission || opts.Request != nil:
		v.admission = true
		v.overlay = l.overlay(obj, opts.Request)
	case opts.Mode == core.ModeRuntime:
		// A runtime event reads the cache as audit does, but is evaluated
		// once: nothing re-evaluates it when what it read changes, so its
		// reads are not recorded (a flood of events must not evict
		// audit's dependencies from the bounded index).
	case l.o.Index != nil:
		v.dep = Dependent{Rule: RuleKeyOf(r.Rule), Object: ObjectKeyOf(obj)}
		l.o.Index.Forget(v.dep)
		v.record = true
	}
	return v
}

// overlay is the inbound object of an admission request, as lookups see it.
type overlay struct {
	res       schema.GroupVersionResource
	namespace string
	name      string
	// obj is nil for DELETE: the object is gone.
	obj map[string]any
}

func (l *Lookups) overlay(obj *unstructured.Unstructured, req *core.Request) *overlay {
	if obj == nil {
		return nil
	}
	res, err := l.o.Resolver.ResourceFor(obj.GroupVersionKind())
	if err != nil {
		l.o.Logger.Debug("lookup overlay: kind not resolved", "kind", obj.GroupVersionKind().String(), "error", err)
		return nil
	}
	o := &overlay{res: res.GVR, namespace: obj.GetNamespace(), name: obj.GetName(), obj: obj.Object}
	if req != nil && req.Operation == "DELETE" {
		o.obj = nil
	}
	return o
}

// RuleKey identifies a rule across reloads.
type RuleKey struct {
	Kind, Namespace, Name string
}

func (k RuleKey) String() string {
	if k.Namespace == "" {
		return k.Kind + "/" + k.Name
	}
	return k.Kind + "/" + k.Namespace + "/" + k.Name
}

// RuleKeyOf returns the key of r: for a custom resource its metadata.name,
// which the status writer looks it up by and which, unlike spec.name, no
// other rule object of its namespace shares; for a folder rule its name.
func RuleKeyOf(r *core.Rule) RuleKey {
	name := r.Source.Name
	if name == "" {
		name = r.Name
	}
	return RuleKey{Kind: r.Source.Kind, Namespace: r.Namespace, Name: name}
}

// ObjectKey identifies an evaluated object for re-evaluation.
type ObjectKey struct {
	GVK             schema.GroupVersionKind
	Namespace, Name string
}

func (k ObjectKey) String() string {
	return fmt.Sprintf("%s %s/%s", k.GVK.Kind, k.Namespace, k.Name)
}

// ObjectKeyOf returns the key of obj.
func ObjectKeyOf(obj *unstructured.Unstructured) ObjectKey {
	return ObjectKey{GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
}
