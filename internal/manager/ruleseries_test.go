package manager

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
)

// TestRuleSeriesGoWithTheirRule runs admission and audit with a tenant's
// PortalRule that errs on every ConfigMap of its namespace: its errors
// count under the rule label "<namespace>/<name>", never under the bare
// name a cluster rule may have, and the series go when the rule does, so
// a tenant cannot grow Portal's metrics by renaming rules.
func TestRuleSeriesGoWithTheirRule(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	const ns = "series-tenant"
	c := clusterClient(t, cl, Defaults().Namespace, ns)
	cfg, reg, _ := layerConfig(t, "rule-series")
	cfg.Admission.Enabled = true
	cfg.Audit.Enabled = true
	if err := cfg.Sinks.Parse("--report-format=none"); err != nil {
		t.Fatal(err)
	}
	runUntilReady(t, cl, cfg)

	r := &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Name: "errs", Namespace: ns},
		Spec: policyv1alpha1.RuleSpec{
			Name:     "no-privileged",
			Severity: "low",
			OnError:  "allow",
			Mode:     []policyv1alpha1.Mode{"admission", "audit"},
			Match:    policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Group: "", Kind: "ConfigMap"}}},
			// int() of a name with letters fails at run time.
			Rule:    `int(metadata.name) > 0`,
			Message: "never",
		},
	}
	if err := c.Create(ctx, r); err != nil {
		t.Fatal(err)
	}
	const label = ns + "/no-privileged"
	want := []string{"portal_admission_rule_errors_total", "portal_audit_rule_errors_total"}
	i := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		// The webhook configuration follows the rule set asynchronously:
		// create ConfigMaps until admission has evaluated one.
		i++
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: ns}}
		if err := c.Create(ctx, cm); err != nil {
			return false, err
		}
		return slices.Equal(withRuleLabel(t, reg, label), want), nil
	})
	if err != nil {
		t.Fatalf("series with rule=%q: %v, want %v: %v", label, withRuleLabel(t, reg, label), want, err)
	}
	if got := withRuleLabel(t, reg, "no-privileged"); len(got) > 0 {
		t.Errorf("the tenant's rule counted under the bare name no-privileged in %v", got)
	}

	if err := c.Delete(ctx, r); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(withRuleLabel(t, reg, label)) == 0, nil
	})
	if err != nil {
		t.Fatalf("series of the deleted rule remain in %v", withRuleLabel(t, reg, label))
	}
}

// withRuleLabel lists, in order, the metric families of reg with a series
// whose rule label is value.
func withRuleLabel(t *testing.T, reg *prometheus.Registry, value string) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
				return lp.GetName() == "rule" && lp.GetValue() == value
			}) {
				out = append(out, mf.GetName())
				break
			}
		}
	}
	return out
}

// clusterClient is a client of cl with Portal's scheme, after creating
// namespaces (those that exist already are kept).
func clusterClient(t *testing.T, cl *devcluster.Cluster, namespaces ...string) client.Client {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cl.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return c
}
