package waf_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/test/waftest"
)

// The control plane and the WAF layer are shared by the tests of this
// package and started on first use.
var (
	env struct {
		client client.Client
		layer  *waf.Layer
		cache  *cache.Client
		reg    *prometheus.Registry
		waf    *waftest.Env
	}
	shared = devtest.Shared{Setup: func(cl *devcluster.Cluster) (func() error, error) {
		e, stop, err := waftest.Start(cl, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			return nil, err
		}
		env.client, env.layer, env.cache, env.reg, env.waf = e.Client, e.Layer, e.Cache, e.Registry, e
		return stop, nil
	}}
)

func TestMain(m *testing.M) { shared.Main(m) }

func cluster(t *testing.T) {
	t.Helper()
	shared.Cluster(t)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	devtest.Eventually(t, what, cond)
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func namespace(t *testing.T, name string) string {
	t.Helper()
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

func source(ns, name, rules string) *wafv1alpha1.RuleSource {
	return &wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: wafv1alpha1.RuleSourceSpec{Rules: rules}}
}

func data(ns, name string, files map[string]string) *wafv1alpha1.RuleData {
	return &wafv1alpha1.RuleData{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: wafv1alpha1.RuleDataSpec{Files: files}}
}

func ruleSet(ns, name string, sources []string, dataNames ...string) *wafv1alpha1.RuleSet {
	rs := &wafv1alpha1.RuleSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, s := range sources {
		rs.Spec.Sources = append(rs.Spec.Sources, wafv1alpha1.SourceReference{Name: s})
	}
	for _, d := range dataNames {
		rs.Spec.Data = append(rs.Spec.Data, wafv1alpha1.DataReference{Name: d})
	}
	return rs
}

// conditionsOf reads a RuleSet and returns its Ready and Degraded conditions.
func conditionsOf(t *testing.T, rs *wafv1alpha1.RuleSet) (ready, degraded *metav1.Condition) {
	t.Helper()
	if err := env.client.Get(context.Background(), client.ObjectKeyFromObject(rs), rs); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(rs.Status.Conditions, wafv1alpha1.ConditionReady),
		meta.FindStatusCondition(rs.Status.Conditions, wafv1alpha1.ConditionDegraded)
}

// readyWith waits until Ready has this status and reason for the RuleSet's
// current generation.
func readyWith(t *testing.T, rs *wafv1alpha1.RuleSet, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s Ready=%s/%s", rs.Name, status, reason), func() bool {
		r, _ := conditionsOf(t, rs)
		return r != nil && r.Status == status && r.Reason == reason && r.ObservedGeneration == rs.Generation
	})
}

// compiles returns the count of compiler reconciles with this result.
func compiles(t *testing.T, result string) float64 {
	t.Helper()
	mfs, err := env.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "portal_waf_ruleset_compiles_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// hasEvent reports whether the RuleSet has an event with this reason.
func hasEvent(t *testing.T, rs *wafv1alpha1.RuleSet, reason string) bool {
	t.Helper()
	var list eventsv1.EventList
	if err := env.client.List(context.Background(), &list, client.InNamespace(rs.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.Regarding.Name == rs.Name && e.Reason == reason {
			return true
		}
	}
	return false
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
