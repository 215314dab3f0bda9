package exprlang

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/vilaca/portal/internal/core"
)

// fakeCluster is a pure unit-test stand-in for internal/lookup's binding.
type fakeCluster struct {
	objs  map[string][]map[string]any // resource -> objects
	calls []string
}

var _ Cluster = (*fakeCluster)(nil)

func (f *fakeCluster) ByName(_ context.Context, res string, consistent bool, ns, name string) (map[string]any, error) {
	f.calls = append(f.calls, fmt.Sprintf("%s byName %v %s/%s", res, consistent, ns, name))
	for _, o := range f.objs[res] {
		md := o["metadata"].(map[string]any)
		if md["namespace"] == ns && md["name"] == name {
			return o, nil
		}
	}
	return nil, nil
}

func (f *fakeCluster) List(_ context.Context, res string, consistent bool, ns string, sel labels.Selector, _ core.ReadBudget) ([]any, error) {
	f.calls = append(f.calls, fmt.Sprintf("%s list %v %s %s", res, consistent, ns, sel))
	var out []any
	for _, o := range f.objs[res] {
		md := o["metadata"].(map[string]any)
		set := labels.Set{}
		if l, ok := md["labels"].(map[string]any); ok {
			for k, v := range l {
				set[k] = v.(string)
			}
		}
		if (ns == "" || md["namespace"] == ns) && sel.Matches(set) {
			out = append(out, o)
		}
	}
	return out, nil
}

func obj(ns, name string, lbls map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{"namespace": ns, "name": name, "labels": lbls}}
}

func TestLookups(t *testing.T) {
	c := &fakeCluster{objs: map[string][]map[string]any{
		"services": {obj("a", "web", map[string]any{"app": "web"}), obj("a", "db", map[string]any{"app": "db"})},
		"pods":     {obj("a", "web-1", map[string]any{"app": "web", "tier": "fe"})},
	}}
	env := map[string]any{
		"object":  map[string]any{"metadata": map[string]any{"namespace": "a"}, "spec": map[string]any{"selector": map[string]any{"app": "web"}}},
		"cluster": c,
	}
	tests := []struct {
		expr string
		want any
	}{
		{`cluster.services.byName("a", "web") != nil`, true},
		{`cluster.services.byName("a", "nope") == nil`, true},
		{`cluster.services.byName("a", "web").metadata.labels.app`, "web"},
		{`len(cluster.pods.list(object.metadata.namespace, object.spec.selector))`, 1},
		{`len(cluster.pods.list("a", "tier in (fe, be)"))`, 1},
		{`len(cluster.services.list("a", {}))`, 2},
		{`len(cluster.services.list("a", nil))`, 2},
		{`len(cluster["services"].list("a", {"matchLabels": {"app": "db"}}))`, 1},
		{`cluster.consistent.services.byName("a", "db") != nil`, true},
		{`any(cluster.services.list("a", ""), selects(#.metadata.labels, {"app": "web"}))`, true},
		{`selects({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}, {"app": "web"})`, true},
		{`selects(nil, {"app": "web"})`, false},
	}
	e := testEngine()
	for _, tt := range tests {
		p, err := e.Compile(tt.expr)
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		got, err := p.Eval(context.Background(), env)
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		if got != tt.want {
			t.Errorf("%s = %v, want %v", tt.expr, got, tt.want)
		}
	}
	if !slices.Contains(c.calls, "services byName true a/db") {
		t.Errorf("consistent lookup not passed through: %v", c.calls)
	}
}

func TestLookupsAreListedAtCompile(t *testing.T) {
	p, err := testEngine().Compile(`cluster.poddisruptionbudgets.list("a", {}) != nil && cluster.consistent.ingresses.byName("a", "b") == nil && cluster.poddisruptionbudgets.list("b", "") == nil`)
	if err != nil {
		t.Fatal(err)
	}
	got := p.(interface{ Lookups() []core.Lookup }).Lookups()
	want := []core.Lookup{{Resource: "poddisruptionbudgets", Method: "list"}, {Resource: "ingresses", Method: "byName", Consistent: true}}
	if !slices.Equal(got, want) {
		t.Errorf("Lookups() = %v, want %v", got, want)
	}
}

func TestLookupCompileErrors(t *testing.T) {
	tests := map[string]string{
		`cluster.services != nil`:                                       "only read through lookups",
		`cluster != nil`:                                                "only read through lookups",
		`cluster[object.kind].list("a", {})`:                            "constant plural name",
		`cluster.services.get("a", "b")`:                                "unknown lookup",
		`cluster.services.byName("a")`:                                  "takes 2 arguments",
		`cluster.services?.byName("a", "b")`:                            "without ?.",
		`len(cluster.services.list("a", {}, "x"))`:                      "takes 2 arguments",
		`cluster.consistent.services.list("a") > 1`:                     "takes 2 arguments",
		`$env.cluster.ByName(nil, "configmaps", true, "a", "b") != nil`: "$env is not available",
		`$env["cluster"] != nil`:                                        "$env is not available",
	}
	e := testEngine()
	for expr, want := range tests {
		_, err := e.Compile(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to contain %q", expr, err, want)
		}
	}
}

func TestLookupRuntimeErrors(t *testing.T) {
	e := testEngine()
	tests := []struct {
		expr string
		env  map[string]any
		want string
	}{
		{`cluster.services.byName("a", "b") == nil`, map[string]any{}, "not available here"},
		{`cluster.services.list("a", 3) == nil`, map[string]any{"cluster": &fakeCluster{}}, "want a string, a map of labels"},
		{`cluster.services.list("a", "a in (") == nil`, map[string]any{"cluster": &fakeCluster{}}, "selector"},
		{`cluster.services.byName("a", 1) == nil`, map[string]any{"cluster": &fakeCluster{}}, "name must be a string"},
	}
	for _, tt := range tests {
		p, err := e.Compile(tt.expr)
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		_, err = p.Eval(context.Background(), tt.env)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.expr, err, tt.want)
		}
	}
}

// A list pays per object it returns: 5,000 objects listed 200 times is a
// million operations and 16 MiB of elements, past the default budget.
func TestListIsChargedPerElement(t *testing.T) {
	c := &fakeCluster{objs: map[string][]map[string]any{}}
	for i := range 5000 {
		c.objs["services"] = append(c.objs["services"], obj("a", fmt.Sprint("s", i), nil))
	}
	e := testEngine()
	p, err := e.Compile(`len(cluster.services.list("a", {})) == 5000`)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := p.Eval(context.Background(), map[string]any{"cluster": c}); err != nil || v != true {
		t.Fatalf("one list: %v, %v", v, err)
	}
	p, err = e.Compile(`any(1..200, len(cluster.services.list("a", {})) < 0)`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Eval(context.Background(), map[string]any{"cluster": c})
	if !errors.Is(err, core.ErrBudgetExceeded) {
		t.Fatalf("200 lists of 5,000: error %v, want the budget exceeded", err)
	}
}
