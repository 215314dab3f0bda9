// Package waf_test applies the WAF examples to a real API server with
// Portal's WAF layer running, and checks that every RuleSet becomes Ready and
// that what the cache serves blocks what the example says it blocks.
package waf_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
	"github.com/vilaca/portal/test/waftest"
)

const ns = "waf-examples"

// start runs the WAF layer against a fresh control plane until the test ends.
// The cache client is a data plane's: a token of a ServiceAccount in the
// examples' namespace, TLS verified against the cache's CA.
func start(t *testing.T) (client.Client, *cache.Client) {
	t.Helper()
	cl, err := devcluster.Start(context.Background(), devcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	env, stop, err := waftest.Start(cl, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(errors.Join(err, cl.Stop()))
	}
	t.Cleanup(func() {
		if err := errors.Join(stop(), cl.Stop()); err != nil {
			t.Error(err)
		}
	})
	token, err := env.Token(context.Background(), ns, "waf-proxy", cache.Audience)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := env.NewClient(token)
	if err != nil {
		t.Fatal(err)
	}
	return env.Client, cc
}

// apply creates every document of the YAML files in ns.
func apply(t *testing.T, c client.Client, files ...string) {
	t.Helper()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj unstructured.Unstructured
			if err := dec.Decode(&obj.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			obj.SetNamespace(ns)
			if err := c.Create(context.Background(), &obj); err != nil {
				t.Fatalf("%s: create %s %s: %v", f, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
}

// status compiles what the cache serves for a RuleSet, as the waf-proxy
// does, and returns the status of a GET of uri with this User-Agent.
func status(t *testing.T, cc *cache.Client, name, uri, agent string) int {
	t.Helper()
	e, err := cc.Entry(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	compiled, err := ruleset.Compile(ruleset.Bundle{Rules: e.Rules, DataFiles: e.DataFiles}, ruleset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer compiled.Close()
	tx := compiled.WAF.NewTransaction()
	defer tx.Close()
	tx.ProcessConnection("127.0.0.1", 40000, "127.0.0.1", 80)
	tx.ProcessURI(uri, "GET", "HTTP/1.1")
	tx.AddRequestHeader("Host", "shop.example.com")
	tx.AddRequestHeader("User-Agent", agent)
	tx.AddRequestHeader("Accept", "text/html")
	if it := tx.ProcessRequestHeaders(); it != nil {
		return it.Status
	}
	if it, _ := tx.ProcessRequestBody(); it != nil {
		return it.Status
	}
	return 0
}

func TestExamplesBecomeReady(t *testing.T) {
	// start made the namespace, with the data plane's ServiceAccount in it.
	c, cc := start(t)
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	apply(t, c, files...)

	var list wafv1alpha1.RuleSetList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil || len(list.Items) != 2 {
		t.Fatalf("%d RuleSets: %v", len(list.Items), err)
	}
	for _, rs := range list.Items {
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(&rs), &rs); err != nil {
				return false, err
			}
			r := meta.FindStatusCondition(rs.Status.Conditions, wafv1alpha1.ConditionReady)
			d := meta.FindStatusCondition(rs.Status.Conditions, wafv1alpha1.ConditionDegraded)
			return r != nil && r.Status == metav1.ConditionTrue && d != nil && d.Status == metav1.ConditionFalse, nil
		})
		if err != nil {
			t.Fatalf("RuleSet %s not Ready and not Degraded: %v; status %+v", rs.Name, err, rs.Status)
		}
		t.Logf("%s: %d rules, revision %s", rs.Name, rs.Status.RuleCount, rs.Status.CachedRevision.UUID)
	}

	for _, tc := range []struct {
		ruleSet, uri, agent string
		want                int
	}{
		{"crs", "/products?id=1%20UNION%20SELECT%20password%20FROM%20users", "Mozilla/5.0", 403},
		{"crs", "/products?id=42", "Mozilla/5.0", 0},
		{"block-scanners", "/", "sqlmap/1.8#stable (https://sqlmap.org)", 403},
		{"block-scanners", "/", "Mozilla/5.0", 0},
	} {
		if got := status(t, cc, tc.ruleSet, tc.uri, tc.agent); got != tc.want {
			t.Errorf("%s: GET %s as %q: status %d, want %d", tc.ruleSet, tc.uri, tc.agent, got, tc.want)
		}
	}
}
