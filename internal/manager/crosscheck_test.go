package manager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

var fixtureNamespace = regexp.MustCompile(`namespace: ([a-z0-9-]+)`)

// TestEvalClusterStateMatchesLiveAudit holds `portal eval --cluster-state`
// to what live audit reports: for every cross-resource cookbook rule, the
// fixture's objects go into a real API server (namespaces prefixed per
// rule), Portal audits them with lookups into PolicyReports, and the
// reports' results must equal, as a set of (rule, object, result,
// message), what eval reports for the same manifests (less its passes,
// which reports do not carry).
func TestEvalClusterStateMatchesLiveAudit(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	c, err := client.New(cl.Config, client.Options{Scheme: mustScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The poll below lists reports many times a second: no client-side
	// throttling.
	rc := rest.CopyConfig(cl.Config)
	rc.QPS, rc.Burst = 1000, 1000
	dyn := dynamic.NewForConfigOrDie(rc)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Defaults().Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "examples", "rules", "cross-resource")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cookbook rules in %s: %v", dir, err)
	}
	for i, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			prefix := fmt.Sprintf("xc%d-", i)
			fixture := readText(t, filepath.Join(dir, "testdata", name, "cluster.yaml"))
			fixture = fixtureNamespace.ReplaceAllString(fixture, "namespace: "+prefix+"$1")
			tmp := t.TempDir()
			state := filepath.Join(tmp, "cluster.yaml")
			writeText(t, state, fixture)
			rules := filepath.Join(tmp, "rules")
			writeText(t, filepath.Join(rules, name+".yaml"), readText(t, file))

			namespaces := createFixture(t, c, state)
			want := evalClusterState(t, state, filepath.Join(rules, name+".yaml"))
			if len(want) == 0 {
				t.Fatal("eval reports nothing for the fixture: the comparison would be empty")
			}

			cfg, _, _ := layerConfig(t, "crosscheck-"+name)
			cfg.Audit.Enabled = true
			cfg.Audit.ResyncPeriod = time.Hour
			if err := cfg.Sinks.Parse("--report-format=wgpolicyk8s"); err != nil {
				t.Fatal(err)
			}
			cfg.RulesFolder = rules
			runUntilReady(t, cl, cfg)

			var got []string
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				got = reportResults(ctx, t, dyn, namespaces)
				return slices.Equal(got, want), nil
			})
			if err != nil {
				t.Errorf("live audit and eval --cluster-state differ\nonly in live audit:\n  %s\nonly in eval:\n  %s",
					strings.Join(minus(got, want), "\n  "), strings.Join(minus(want, got), "\n  "))
			}
		})
	}
}

// createFixture creates the fixture's objects (CustomResourceDefinitions
// first, then their namespaces), deletes them when the test ends so the
// next rule's cluster-wide lookups do not see them, and returns the
// namespaces it used.
func createFixture(t *testing.T, c client.Client, path string) []string {
	t.Helper()
	ctx := context.Background()
	docs, err := manifest.ReadPaths([]string{path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, d := range docs {
		o, err := d.Objects()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o...)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return boolInt(b.GetKind() == "CustomResourceDefinition") - boolInt(a.GetKind() == "CustomResourceDefinition")
	})
	var namespaces []string
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
	for _, o := range objs {
		o := o.DeepCopy()
		// A custom resource waits for its freshly created definition to
		// be served.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := c.Create(ctx, o)
			if apierrors.IsAlreadyExists(err) && o.GetKind() == "CustomResourceDefinition" {
				return true, nil
			}
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("create %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if o.GetKind() != "CustomResourceDefinition" {
			t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
		}
	}
	return namespaces
}

// evalClusterState runs what `portal eval --rules rule --file state
// --cluster-state state` runs, and returns its results as sorted keys.
func evalClusterState(t *testing.T, state, rulePath string) []string {
	t.Helper()
	cluster, errs := eval.LoadClusterState([]string{state}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	r := lookup.FromReader{R: cluster}
	eng := engine.New(exprlang.New(), engine.WithBinder(lookup.New(lookup.Options{Cache: r, Resolver: r})))
	rules, errs := rule.LoadPaths(eng, []string{rulePath})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	eng.SetRules(rules)
	docs, err := manifest.ReadPaths([]string{state}, nil)
	if err != nil {
		t.Fatal(err)
	}
	report, errs := eval.Evaluate(context.Background(), eng, docs, eval.Options{Mode: core.ModeAudit, Jobs: 1, Cluster: cluster})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var keys []string
	for _, res := range report.Results {
		// PolicyReports carry what needs attention; passes are not written.
		if res.Result == "pass" {
			continue
		}
		keys = append(keys, resultKey(res.Rule, res.Resource.Kind, res.Resource.Namespace, res.Resource.Name, res.Result, res.Message))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// reportResults reads the PolicyReports of the namespaces and returns their
// results as sorted keys.
func reportResults(ctx context.Context, t *testing.T, dyn dynamic.Interface, namespaces []string) []string {
	var keys []string
	for _, ns := range namespaces {
		l, err := dyn.Resource(policyReportGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("list PolicyReports in %s: %v", ns, err)
			continue
		}
		for _, r := range l.Items {
			results, _, _ := unstructured.NestedSlice(r.Object, "results")
			for _, x := range results {
				m, _ := x.(map[string]any)
				refs, _ := m["resources"].([]any)
				for _, ref := range refs {
					o, _ := ref.(map[string]any)
					keys = append(keys, resultKey(str(m["policy"]), str(o["kind"]), str(o["namespace"]), str(o["name"]), str(m["result"]), str(m["message"])))
				}
			}
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

func resultKey(ruleName, kind, ns, name, result, message string) string {
	return fmt.Sprintf("%s %s %s/%s %s %q", ruleName, kind, ns, name, result, message)
}

func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func str(v any) string { s, _ := v.(string); return s }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func readText(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func writeText(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
