package eval

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// DefaultPageSize is how many objects one list request of EvaluateLive
// asks for: the API server's own default for paginated lists.
const DefaultPageSize = 500

// LiveOptions configure EvaluateLive.
type LiveOptions struct {
	Options
	// PageSize bounds each list request. Default DefaultPageSize.
	PageSize int64
	// Progress, when set, is called after each page with the resource
	// being listed, how many of the resources to list came before it, how
	// many there are, and the objects evaluated so far.
	Progress func(resource string, done, total, objects int)
	// Skipped, when set, is told about each kind a rule matches that the
	// cluster does not serve; it has no objects to evaluate.
	Skipped func(kind string, err error)
}

// liveTarget is one list to run: a resource in every namespace, or in one.
type liveTarget struct {
	resource  schema.GroupVersionResource
	namespace string
}

// EvaluateLive evaluates the engine's rules against the live objects of a
// cluster, read-only: for each kind the rules match it lists the objects,
// a page at a time, and evaluates each page as it arrives, so memory holds a
// page of objects and the report. A kind only PortalRules match is listed
// only in their namespaces, as the audit layer watches it. Results come
// resource by resource (sorted), then in the API server's order. A list the
// cluster refuses (RBAC) fails the run: a partial answer must not pass.
func EvaluateLive(ctx context.Context, eng *engine.Engine, dyn dynamic.Interface, mapper meta.RESTMapper, o LiveOptions) (*Report, []error) {
	pageSize := cmp.Or(o.PageSize, DefaultPageSize)
	targets := liveTargets(eng, mapper, o)
	rep := newReport(o.Options)
	// Pages are merged into rep at once: only rep spills.
	page := o.Options
	page.SpillDir, page.Destination = "", nil
	var errs []error
	for i, t := range targets {
		var ri dynamic.ResourceInterface = dyn.Resource(t.resource)
		if t.namespace != "" {
			ri = dyn.Resource(t.resource).Namespace(t.namespace)
		}
		label := t.resource.GroupResource().String()
		if t.namespace != "" {
			label += " in " + t.namespace
		}
		opts := metav1.ListOptions{Limit: pageSize}
		for {
			list, err := ri.List(ctx, opts)
			if err != nil {
				if apierrors.IsForbidden(err) {
					err = fmt.Errorf("%w (portal eval --kubeconfig needs list on every resource the rules match)", err)
				}
				return rep, append(errs, fmt.Errorf("list %s: %w", label, err))
			}
			objs := make(objects, len(list.Items))
			for j := range list.Items {
				objs[j] = &list.Items[j]
			}
			r, perrs := EvaluateObjects(ctx, eng, objs, page)
			rep.Merge(r)
			errs = append(errs, perrs...)
			if o.Progress != nil {
				o.Progress(label, i, len(targets), rep.Objects())
			}
			if ctx.Err() != nil {
				return rep, errs
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	return rep, errs
}

// liveTargets resolves the kinds the rules match to the lists to run.
func liveTargets(eng *engine.Engine, mapper meta.RESTMapper, o LiveOptions) []liveTarget {
	type where struct {
		cluster    bool
		namespaces []string
	}
	byGVR := map[schema.GroupVersionResource]*where{}
	kinds := eng.GVKNamespaces(o.Mode)
	gvks := make([]core.GVK, 0, len(kinds))
	for g := range kinds {
		gvks = append(gvks, g)
	}
	slices.SortFunc(gvks, func(a, b core.GVK) int { return cmp.Compare(a.String(), b.String()) })
	for _, g := range gvks {
		namespaces := kinds[g]
		var versions []string
		if g.Version != "" {
			versions = []string{g.Version}
		}
		m, err := mapper.RESTMapping(schema.GroupKind{Group: g.Group, Kind: g.Kind}, versions...)
		if err != nil {
			if o.Skipped != nil {
				o.Skipped(g.String(), err)
			}
			continue
		}
		namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
		if namespaces != nil && !namespaced {
			// A PortalRule never matches a cluster-scoped object.
			continue
		}
		w := byGVR[m.Resource]
		if w == nil {
			w = &where{}
			byGVR[m.Resource] = w
		}
		w.cluster = w.cluster || namespaces == nil
		w.namespaces = append(w.namespaces, namespaces...)
	}
	var out []liveTarget
	for gvr, w := range byGVR {
		if w.cluster {
			out = append(out, liveTarget{resource: gvr})
			continue
		}
		slices.Sort(w.namespaces)
		for _, ns := range slices.Compact(w.namespaces) {
			out = append(out, liveTarget{resource: gvr, namespace: ns})
		}
	}
	slices.SortFunc(out, func(a, b liveTarget) int {
		return cmp.Or(cmp.Compare(a.resource.String(), b.resource.String()), cmp.Compare(a.namespace, b.namespace))
	})
	return out
}
