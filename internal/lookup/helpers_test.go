package lookup_test

import (
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/lookup"
)

func objs(t testing.TB, docs ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

// memory is the objects as a cluster, through the cluster cache's
// manifest reader (what portal eval --cluster-state uses).
func memory(t testing.TB, docs ...string) lookup.Cache {
	t.Helper()
	var b clustercache.StaticBuilder
	for i, o := range objs(t, docs...) {
		if err := b.Add(o, fmt.Sprint("doc ", i)); err != nil {
			t.Fatal(err)
		}
	}
	return lookup.FromReader{R: b.Build()}.Static()
}

func rule(name, ns, expr string, gvks ...core.GVK) *core.Rule {
	kind := "PortalClusterRule"
	if ns != "" {
		kind = "PortalRule"
	}
	return &core.Rule{
		Name: name, Namespace: ns, Enabled: true, Severity: core.SeverityHigh,
		Modes:             []core.Mode{core.ModeAdmission, core.ModeAudit},
		EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny,
		Match: core.Match{GVKs: gvks}, Expression: expr, Message: name,
		Source: core.Source{Kind: kind, Namespace: ns, Name: name},
	}
}

func newEngine(t testing.TB, l *lookup.Lookups, rules ...*core.Rule) *engine.Engine {
	t.Helper()
	e := engine.New(exprlang.New(), engine.WithBinder(l))
	var compiled []*engine.Rule
	for _, r := range rules {
		c, err := e.Compile(r)
		if err != nil {
			t.Fatal(err)
		}
		compiled = append(compiled, c)
	}
	e.SetRules(compiled)
	return e
}

var (
	deployGVK  = core.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}
	serviceGVK = core.GVK{Version: "v1", Kind: "Service"}
)

type requeues struct {
	mu   sync.Mutex
	objs []lookup.ObjectKey
}

func (r *requeues) Requeue(o lookup.ObjectKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.objs = append(r.objs, o)
}

func (r *requeues) list() []lookup.ObjectKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lookup.ObjectKey(nil), r.objs...)
}
