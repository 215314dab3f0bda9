package lookup

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/vilaca/portal/internal/core"
)

// DynamicAPI answers cluster.consistent.* at admission from the API server:
// a quorum read (resourceVersion unset), one round trip, bounded by the
// admission request's deadline.
type DynamicAPI struct {
	Client dynamic.Interface
}

var _ APIReader = DynamicAPI{}

// Get implements APIReader.
func (d DynamicAPI) Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error) {
	u, err := d.Client.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s %s/%s from the API server: %w", gvr.GroupResource(), namespace, name, err)
	}
	return withoutManagedFields(u.Object), nil
}

// withoutManagedFields drops metadata.managedFields, as the cluster cache
// does: a rule sees the same object whichever answers it, and is not
// charged for the field bookkeeping it never reads.
func withoutManagedFields(obj map[string]any) map[string]any {
	if md, ok := obj["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
	return obj
}

// Pages of a consistent list. Nothing is known of the objects' size before
// the first page, and the API server returns objects of up to 1.5 MiB, so
// it is small; each later page holds as many objects of the average size
// seen so far as the evaluation's budget still affords, plus one, so a list
// larger than the budget fails with the budget error instead of stopping
// short.
const (
	firstPage = 16
	maxPage   = 500
	// minObjectBytes is less than what the smallest object is charged
	// (its metadata alone).
	minObjectBytes = 256
)

// List implements APIReader: page by page, each charged to budget before
// the next is asked for.
func (d DynamicAPI) List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, sel labels.Selector, budget core.ReadBudget) ([]map[string]any, error) {
	opts := metav1.ListOptions{Limit: pageSize(budget.BytesLeft(), minObjectBytes, firstPage)}
	if sel != nil && !sel.Empty() {
		opts.LabelSelector = sel.String()
	}
	var out []map[string]any
	for {
		before := budget.BytesLeft()
		l, err := d.Client.Resource(gvr).Namespace(namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list %s in %q from the API server: %w", gvr.GroupResource(), namespace, err)
		}
		page := make([]map[string]any, len(l.Items))
		for i := range l.Items {
			page[i] = withoutManagedFields(l.Items[i].Object)
		}
		if err := budget.Charge(page); err != nil {
			return nil, fmt.Errorf("list %s in %q from the API server: %w", gvr.GroupResource(), namespace, err)
		}
		out = append(out, page...)
		if l.GetContinue() == "" {
			return out, nil
		}
		if err := budget.Request(); err != nil {
			return nil, fmt.Errorf("list %s in %q from the API server: %d objects read, more remain: %w", gvr.GroupResource(), namespace, len(out), err)
		}
		each := max((before-budget.BytesLeft())/int64(max(len(page), 1)), minObjectBytes)
		opts.Limit, opts.Continue = pageSize(budget.BytesLeft(), each, maxPage), l.GetContinue()
	}
}

// pageSize is how many objects of each bytes fit in left, plus one, at most
// most.
func pageSize(left, each, most int64) int64 { return min(left/each+1, most) }

// AccessReview checks Portal's own permissions with
// SelfSubjectAccessReviews.
type AccessReview struct {
	Client authorizationv1client.SelfSubjectAccessReviewInterface
}

// CanWatch implements AccessChecker: list and watch must both be allowed.
func (a AccessReview) CanWatch(ctx context.Context, gvr schema.GroupVersionResource, namespace string) (bool, string, error) {
	for _, verb := range []string{"list", "watch"} {
		r, err := a.Client.Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: gvr.Group, Resource: gvr.Resource, Namespace: namespace},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, "", fmt.Errorf("review %s of %s: %w", verb, gvr.GroupResource(), err)
		}
		if !r.Status.Allowed {
			why := r.Status.Reason
			if why == "" {
				why = verb + " is not allowed"
			}
			return false, why, nil
		}
	}
	return true, "", nil
}
