package controller

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// Field indexes on RuleSets: the RuleSources and RuleData each one names.
const (
	IndexSources = "waf.portal.io/sources"
	IndexData    = "waf.portal.io/data"
)

// SetupIndexes registers the field indexes the controllers look RuleSets up
// by. Call it once per manager, before the controllers start.
func SetupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &wafv1alpha1.RuleSet{}, IndexSources, func(o client.Object) []string {
		rs := o.(*wafv1alpha1.RuleSet)
		out := make([]string, 0, len(rs.Spec.Sources))
		for _, s := range rs.Spec.Sources {
			out = append(out, s.Name)
		}
		return out
	}); err != nil {
		return fmt.Errorf("index RuleSets by source: %w", err)
	}
	if err := idx.IndexField(ctx, &wafv1alpha1.RuleSet{}, IndexData, func(o client.Object) []string {
		rs := o.(*wafv1alpha1.RuleSet)
		out := make([]string, 0, len(rs.Spec.Data))
		for _, d := range rs.Spec.Data {
			out = append(out, d.Name)
		}
		return out
	}); err != nil {
		return fmt.Errorf("index RuleSets by data: %w", err)
	}
	return nil
}

// referrers maps a RuleSource or RuleData to the RuleSets in its namespace
// that name it, through the field index.
func referrers(c client.Reader, index string) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list wafv1alpha1.RuleSetList
		if err := c.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()}); err != nil {
			return nil
		}
		out := make([]reconcile.Request, 0, len(list.Items))
		for _, rs := range list.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rs)})
		}
		return out
	}
}
