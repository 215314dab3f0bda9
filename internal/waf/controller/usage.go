package controller

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// UsageWriter writes status.ruleSets and status.ruleSetCount of RuleSources
// and RuleData: which RuleSets of their namespace name them. It reads the
// field indexes of SetupIndexes and watches RuleSets, so a RuleSet that
// starts or stops naming an object updates it at once. Leader-elected.
type UsageWriter struct {
	client client.Client
}

// NewUsageWriter returns a usage writer using c (the manager's client).
func NewUsageWriter(c client.Client) *UsageWriter { return &UsageWriter{client: c} }

// usageKind is one kind whose usage is written: how to make an object of
// it, the RuleSet index that finds who names it, and the names a RuleSet
// gives of it.
type usageKind struct {
	name  string
	obj   func() client.Object
	index string
	named func(*wafv1alpha1.RuleSet) []string
}

var usageKinds = []usageKind{
	{"rulesource", func() client.Object { return &wafv1alpha1.RuleSource{} }, IndexSources, func(rs *wafv1alpha1.RuleSet) []string {
		out := make([]string, 0, len(rs.Spec.Sources))
		for _, s := range rs.Spec.Sources {
			out = append(out, s.Name)
		}
		return out
	}},
	{"ruledata", func() client.Object { return &wafv1alpha1.RuleData{} }, IndexData, func(rs *wafv1alpha1.RuleSet) []string {
		out := make([]string, 0, len(rs.Spec.Data))
		for _, d := range rs.Spec.Data {
			out = append(out, d.Name)
		}
		return out
	}},
}

// SetupWithManager registers one controller per kind.
func (u *UsageWriter) SetupWithManager(mgr ctrl.Manager) error {
	for _, k := range usageKinds {
		err := ctrl.NewControllerManagedBy(mgr).
			Named("waf-"+k.name+"-usage").
			For(k.obj()).
			// On an update the map runs for the old and the new RuleSet,
			// so an object a RuleSet stops naming is written too.
			Watches(&wafv1alpha1.RuleSet{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				rs, ok := o.(*wafv1alpha1.RuleSet)
				if !ok {
					return nil
				}
				var out []reconcile.Request
				for _, name := range k.named(rs) {
					out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rs.Namespace, Name: name}})
				}
				return out
			})).
			Complete(reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				return ctrl.Result{}, u.write(ctx, k, req)
			}))
		if err != nil {
			return fmt.Errorf("set up %s usage: %w", k.name, err)
		}
	}
	return nil
}

func (u *UsageWriter) write(ctx context.Context, k usageKind, req ctrl.Request) error {
	obj := k.obj()
	if err := u.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	var list wafv1alpha1.RuleSetList
	if err := u.client.List(ctx, &list, client.InNamespace(req.Namespace), client.MatchingFields{k.index: req.Name}); err != nil {
		return fmt.Errorf("list the RuleSets naming %s %s: %w", k.name, req, err)
	}
	names := make([]string, 0, len(list.Items))
	for _, rs := range list.Items {
		names = append(names, rs.Name)
	}
	slices.Sort(names)
	st := wafv1alpha1.UsageStatus{RuleSetCount: int32(len(names)), RuleSets: names[:min(len(names), wafv1alpha1.MaxUsageNames)]}
	if len(st.RuleSets) == 0 {
		st.RuleSets = nil
	}
	var current *wafv1alpha1.UsageStatus
	switch o := obj.(type) {
	case *wafv1alpha1.RuleSource:
		current = &o.Status
	case *wafv1alpha1.RuleData:
		current = &o.Status
	}
	if current.RuleSetCount == st.RuleSetCount && slices.Equal(current.RuleSets, st.RuleSets) {
		return nil
	}
	before := obj.DeepCopyObject().(client.Object)
	*current = st
	if err := u.client.Status().Patch(ctx, obj, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("write the usage of %s %s: %w", k.name, req, err)
	}
	return nil
}
