package checktest_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/network"
)

// testCheck flags policies whose name starts with "marked-": a check that
// no built-in one resembles, so what it finds can only come from it.
const testCheck = "np.test-marked-policy"

// The one edit a new check needs: its registration.
func init() {
	network.Register(network.Check{
		Name: testCheck, Severity: core.SeverityInfo,
		Summary: "the policy's name carries the test's marker",
		Policy: func(_ *network.Namespace, p *network.Policy, m *network.Messages) {
			if strings.HasPrefix(p.Name(), "marked-") {
				m.Add("metadata.name %s starts with marked-", p.Name())
			}
		},
	})
}

// manifests are a namespace with a pod and two policies (one marked),
// each written so no built-in check flags it.
func manifests(t *testing.T) *clustercache.Static {
	t.Helper()
	var b clustercache.StaticBuilder
	pol := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
			"metadata": map[string]any{"name": name, "namespace": "shop"},
			"spec":     map[string]any{"podSelector": map[string]any{}, "policyTypes": []any{"Ingress"}},
		}}
	}
	pod := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "labels": map[string]any{"app": "web"}},
	}}
	for _, o := range []*unstructured.Unstructured{pol("marked-deny"), pol("plain-deny"), pod} {
		if err := b.Add(o, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return b.Build()
}

// found lists "policy rule: message" of every finding.
func found(t *testing.T, cfg network.Config) []string {
	t.Helper()
	ofs, err := network.Analyse(manifests(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, of := range ofs {
		for _, f := range of.Findings {
			out = append(out, of.Object.Name+" "+f.RuleName()+": "+f.Message)
		}
	}
	return out
}

// TestRegisteredCheckNeedsNoOtherEdit: a check registered from outside the
// package runs in the analysis on the objects it flags only, is listed by
// Checks, the flags' help and the docs' table, is enabled and disabled by
// the configuration, carries its rule into findings, and has its metric
// series from the start.
func TestRegisteredCheckNeedsNoOtherEdit(t *testing.T) {
	if !slices.Contains(network.Checks(), testCheck) {
		t.Fatalf("Checks() = %v, without %s", network.Checks(), testCheck)
	}
	want := []string{"marked-deny " + testCheck + ": metadata.name marked-deny starts with marked-"}
	if got := found(t, network.DefaultConfig()); !slices.Equal(got, want) {
		t.Errorf("every check enabled: findings %q, want %q", got, want)
	}
	only := network.DefaultConfig()
	only.Checks = []string{testCheck}
	if err := only.Validate(); err != nil {
		t.Errorf("--network-checks %s: %v", testCheck, err)
	}
	if got := found(t, only); !slices.Equal(got, want) {
		t.Errorf("only %s enabled: findings %q, want %q", testCheck, got, want)
	}
	other := network.DefaultConfig()
	other.Checks = []string{network.CheckBroadCIDR}
	if got := found(t, other); len(got) != 0 {
		t.Errorf("only %s enabled: findings %q, want none", network.CheckBroadCIDR, got)
	}
	if r := network.Rule(testCheck); r == nil || r.Severity != core.SeverityInfo || r.Category != network.Category || r.Message == "" {
		t.Errorf("Rule(%s) = %+v, want its severity, category and summary", testCheck, r)
	}

	cfg := network.DefaultConfig()
	fs := pflag.NewFlagSet("portal", pflag.ContinueOnError)
	network.BindFlags(fs, &cfg)
	if help := fs.Lookup("network-checks").Usage; !strings.Contains(help, testCheck) {
		t.Errorf("--network-checks help %q does not name %s", help, testCheck)
	}
	row := "| [`" + testCheck + "`](#nptest-marked-policy) | NetworkPolicy | info | the policy's name carries the test's marker |"
	if table := network.ChecksTable(); !strings.Contains(table, row) {
		t.Errorf("the docs' table of checks has no row %q:\n%s", row, table)
	}

	reg := prometheus.NewRegistry()
	network.NewMetrics(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				series = series || (mf.GetName() == "portal_network_findings" && l.GetName() == "check" && l.GetValue() == testCheck)
			}
		}
	}
	if !series {
		t.Errorf("portal_network_findings has no series check=%q before any finding", testCheck)
	}
}
