package rule_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

func compiled(t *testing.T, eng *engine.Engine, name, namespace string) *engine.Rule {
	t.Helper()
	r, err := eng.Compile(&core.Rule{
		Name: name, Namespace: namespace, Enabled: true, Expression: "false",
		Severity: core.SeverityLow, Modes: []core.Mode{core.ModeAudit}, EnforcementAction: core.ActionDeny,
		Match: core.Match{GVKs: []core.GVK{{Kind: "ConfigMap"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSeriesFollowRenamedRule: a tenant renames its PortalRule a hundred
// times, each name erring once; Portal keeps the series of the rules that
// exist, not one per name ever used.
func TestSeriesFollowRenamedRule(t *testing.T) {
	eng := engine.New(exprlang.New())
	index := rule.NewIndex(eng)
	series := rule.NewSeries(eng.Rules)
	index.OnChange(series.Sweep)
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "errors_total"}, []string{"rule", "on_error"})
	series.Track(errs.MetricVec)

	platform := compiled(t, eng, "no-privileged", "")
	index.Set("cluster", []*engine.Rule{platform})
	errs.WithLabelValues(platform.MetricLabel(), "deny").Inc()
	for i := range 100 {
		r := compiled(t, eng, fmt.Sprintf("churn-%d", i), "team-a")
		index.Set("team-a/churn", []*engine.Rule{r})
		errs.WithLabelValues(r.MetricLabel(), "deny").Inc()
	}
	if n := testutil.CollectAndCount(errs); n != 2 {
		t.Fatalf("%d series after 100 renames, want 2 (the platform rule and the tenant's current name)", n)
	}
	if v := testutil.ToFloat64(errs.WithLabelValues("no-privileged", "deny")); v != 1 {
		t.Errorf("the platform rule's series is %v, want 1: a sweep must keep live rules' counts", v)
	}
	index.Delete("team-a/churn")
	if n := testutil.CollectAndCount(errs); n != 1 {
		t.Errorf("%d series after the tenant's rule was deleted, want 1", n)
	}
}

// TestMetricLabelQualifiesNamespacedRules: a PortalRule named like a
// cluster rule counts into a series of its own.
func TestMetricLabelQualifiesNamespacedRules(t *testing.T) {
	cluster := &core.Rule{Name: "no-privileged"}
	tenant := &core.Rule{Name: "no-privileged", Namespace: "team-a"}
	if cluster.MetricLabel() != "no-privileged" || tenant.MetricLabel() != "team-a/no-privileged" {
		t.Fatalf("labels %q and %q, want no-privileged and team-a/no-privileged", cluster.MetricLabel(), tenant.MetricLabel())
	}
}
