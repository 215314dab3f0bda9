package lookup_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/lookup"
)

const (
	webA = `{apiVersion: v1, kind: Service, metadata: {name: web, namespace: a, labels: {app: web}}, spec: {selector: {app: web}}}`
	webB = `{apiVersion: v1, kind: Service, metadata: {name: web, namespace: b, labels: {app: web}}, spec: {selector: {app: web}}}`
	secA = `{apiVersion: v1, kind: Secret, metadata: {name: s, namespace: a}}`
	nsA  = `{apiVersion: v1, kind: Namespace, metadata: {name: a}}`
	depA = `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d, namespace: a}, spec: {template: {metadata: {labels: {app: web}}}}}`
)

// A PortalRule's lookups are confined to its namespace: another namespace,
// cluster-scoped resources and Secrets are refused, so a tenant cannot read
// what its own RBAC would not show it through a rule's verdict or message.
func TestPortalRuleLookupsAreConfinedToItsNamespace(t *testing.T) {
	mem := memory(t, webA, webB, secA, nsA, depA)
	l := lookup.New(lookup.Options{Cache: mem, Resolver: mem.(lookup.Resolver)})
	tests := []struct {
		name, ns, expr string
		wantErr        bool
	}{
		{"own namespace", "a", `cluster.services.byName("a", "web") == nil`, false},
		{"own namespace by default", "a", `len(cluster.services.list("", {})) != 1`, false},
		{"other namespace byName", "a", `cluster.services.byName("b", "web") != nil`, true},
		{"other namespace list", "a", `len(cluster.services.list("b", {})) > 0`, true},
		{"cluster-scoped", "a", `cluster.namespaces.byName("", "a") != nil`, true},
		{"secrets", "a", `cluster.secrets.byName("a", "s") != nil`, true},
		{"cluster rule other namespace", "", `cluster.services.byName("b", "web") == nil`, false},
		{"cluster rule all namespaces", "", `len(cluster.services.list("", {})) != 2`, false},
		{"cluster rule secrets", "", `cluster.secrets.byName("a", "s") == nil`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, l, rule("r", tt.ns, tt.expr, deployGVK))
			res, err := e.Evaluate(context.Background(), objs(t, depA)[0], engine.Options{Mode: core.ModeAudit})
			if err != nil || len(res) != 1 {
				t.Fatalf("Evaluate: %v, %v", res, err)
			}
			if tt.wantErr {
				if res[0].Outcome != core.OutcomeError || !errors.Is(res[0].Err, lookup.ErrOtherNamespace) {
					t.Fatalf("outcome %s (%v), want an error: %s", res[0].Outcome, res[0].Err, lookup.ErrOtherNamespace)
				}
				return
			}
			if res[0].Outcome != core.OutcomePass {
				t.Fatalf("outcome %s (%s), want pass", res[0].Outcome, res[0].Message)
			}
		})
	}
}

// At admission the inbound object is what lookups see of it: created,
// updated, or gone when deleted.
func TestAdmissionOverlay(t *testing.T) {
	mem := memory(t, webA)
	l := lookup.New(lookup.Options{Cache: mem, Resolver: mem.(lookup.Resolver)})
	// Flags a Service whose name another Service of the namespace shares
	// the app label with.
	r := rule("dup", "", `len(cluster.services.list(object.metadata.namespace, {"app": "web"})) > 1`, serviceGVK)
	e := newEngine(t, l, r)
	eval := func(doc, op string) core.Outcome {
		t.Helper()
		res, err := e.Evaluate(context.Background(), objs(t, doc)[0], engine.Options{Mode: core.ModeAdmission, Request: &core.Request{Operation: op}})
		if err != nil || len(res) != 1 {
			t.Fatalf("Evaluate: %v, %v", res, err)
		}
		return res[0].Outcome
	}
	api := `{apiVersion: v1, kind: Service, metadata: {name: api, namespace: a, labels: {app: web}}}`
	if got := eval(api, "CREATE"); got != core.OutcomeFail {
		t.Errorf("CREATE of a second app=web Service: %s, want fail (the overlay adds it to the list)", got)
	}
	relabel := `{apiVersion: v1, kind: Service, metadata: {name: web, namespace: a, labels: {app: other}}}`
	if got := eval(relabel, "UPDATE"); got != core.OutcomePass {
		t.Errorf("UPDATE of web: %s, want pass (the overlay replaces the cached version)", got)
	}
	byName := rule("self", "", `cluster.services.byName("a", "web") != nil`, serviceGVK)
	byName.Match.Operations = []string{"DELETE"}
	e = newEngine(t, l, byName)
	res, err := e.Evaluate(context.Background(), objs(t, webA)[0], engine.Options{Mode: core.ModeAdmission, Request: &core.Request{Operation: "DELETE"}})
	if err != nil || res[0].Outcome != core.OutcomePass {
		t.Errorf("DELETE of web: %v %v, want pass (the overlay hides it)", res, err)
	}
}

var pdbGVR = schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}

// In audit the reads are recorded, and a change to what was read re-queues
// the object; cycle protection caps a pair's re-evaluations per window and
// coalesces the rest into one trailing re-evaluation.
func TestChangesRequeueWhatReadThem(t *testing.T) {
	mem := memory(t, depA)
	index := lookup.NewDepIndex(0)
	l := lookup.New(lookup.Options{Cache: mem, Resolver: mem.(lookup.Resolver), Index: index})
	r := rule("pdb", "", `none(cluster.poddisruptionbudgets.list(object.metadata.namespace, {}), selects(#.spec.selector, object.spec.template.metadata.labels))`, deployGVK)
	e := newEngine(t, l, r)
	res, err := e.Evaluate(context.Background(), objs(t, depA)[0], engine.Options{Mode: core.ModeAudit})
	if err != nil || res[0].Outcome != core.OutcomeFail {
		t.Fatalf("no PDB: %v %v, want a failure", res, err)
	}
	rq := &requeues{}
	m := lookup.NewMetrics(nil, nil)
	// Long enough that the five changes below fall in one window however
	// loaded the machine is.
	const window = 2 * time.Second
	w := lookup.NewWatcher(lookup.WatcherOptions{Engine: e, Cache: mem, Resolver: mem.(lookup.Resolver), Index: index, Requeuer: rq, Metrics: m, CycleWindow: window})
	t.Cleanup(w.Stop)
	w.Changed(pdbGVR, "b", "p", nil, labels.Set{})
	if got := rq.list(); len(got) != 0 {
		t.Fatalf("a PDB of another namespace re-queued %v", got)
	}
	for range 5 {
		w.Changed(pdbGVR, "a", "p", nil, labels.Set{})
	}
	got := rq.list()
	if len(got) != lookup.DefaultCycleLimit || got[0].Name != "d" || got[0].GVK.Kind != "Deployment" {
		t.Fatalf("re-queued %v, want deployment a/d %d times", got, lookup.DefaultCycleLimit)
	}
	if n := testutil.ToFloat64(m.CycleSuppressed); n != 2 {
		t.Errorf("portal_lookup_cycle_suppressed_total = %v, want 2", n)
	}
	if n := testutil.ToFloat64(m.CyclePending); n != 1 {
		t.Errorf("portal_lookup_cycle_pending = %v, want 1: the two suppressed changes coalesce into one trailing re-evaluation", n)
	}
	// The suppressed changes are not lost: the pair is evaluated once
	// more when its window allows, long before any resync.
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*window, true, func(context.Context) (bool, error) {
		return len(rq.list()) > lookup.DefaultCycleLimit, nil
	})
	if err != nil {
		t.Fatalf("re-queued %d times, want a trailing re-evaluation after the window: %v", len(rq.list()), err)
	}
	if got := rq.list(); len(got) != lookup.DefaultCycleLimit+1 || got[lookup.DefaultCycleLimit] != got[0] {
		t.Errorf("re-queued %v, want deployment a/d %d times", got, lookup.DefaultCycleLimit+1)
	}
	if n := testutil.ToFloat64(m.CyclePending); n != 0 {
		t.Errorf("portal_lookup_cycle_pending = %v after the trailing re-evaluation, want 0", n)
	}
}

func TestWatcherStatus(t *testing.T) {
	mem := memory(t)
	l := lookup.New(lookup.Options{Cache: mem, Resolver: mem.(lookup.Resolver)})
	e := newEngine(t, l,
		rule("ok", "", `cluster.poddisruptionbudgets.list("", {}) == nil || cluster.services.byName("a", "b") == nil`, deployGVK),
		rule("typo", "", `cluster.deploymnts.list("", {}) == nil`, deployGVK),
		rule("scoped", "a", `cluster.nodes.list("", {}) == nil`, deployGVK),
	)
	w := lookup.NewWatcher(lookup.WatcherOptions{Engine: e, Cache: mem, Resolver: mem.(lookup.Resolver)})
	w.RulesChanged(context.Background())
	st, _ := w.Status(lookup.RuleKey{Kind: "PortalClusterRule", Name: "ok"})
	if st.Reason != lookup.ReasonLookupsReady || strings.Join(st.Resources, ",") != "/services,policy/poddisruptionbudgets" {
		t.Errorf("ok: %+v", st)
	}
	if st, _ := w.Status(lookup.RuleKey{Kind: "PortalClusterRule", Name: "typo"}); st.Reason != lookup.ReasonUnknownResource {
		t.Errorf("typo: %+v", st)
	}
	if st, _ := w.Status(lookup.RuleKey{Kind: "PortalRule", Namespace: "a", Name: "scoped"}); st.Reason != lookup.ReasonLookupOutOfScope {
		t.Errorf("scoped: %+v", st)
	}
	if got := strings.Join(w.Watches(), ","); got != "poddisruptionbudgets.policy,services." {
		t.Errorf("watches %s", got)
	}
}

// denyAll is an access checker that refuses every watch, as RBAC without
// the resource would.
type denyAll struct{}

func (denyAll) CanWatch(context.Context, schema.GroupVersionResource, string) (bool, string, error) {
	return false, "no RBAC rule allows it", nil
}

// A rule reading a resource Portal may not watch says so in its status.
func TestWatcherStatusWhenRBACForbids(t *testing.T) {
	mem := memory(t)
	l := lookup.New(lookup.Options{Cache: mem, Resolver: mem.(lookup.Resolver)})
	e := newEngine(t, l, rule("pdb", "", `cluster.poddisruptionbudgets.list("", {}) == nil`, deployGVK))
	w := lookup.NewWatcher(lookup.WatcherOptions{Engine: e, Cache: mem, Resolver: mem.(lookup.Resolver), Access: denyAll{}})
	w.RulesChanged(context.Background())
	st, ok := w.Status(lookup.RuleKey{Kind: "PortalClusterRule", Name: "pdb"})
	if !ok || st.Reason != lookup.ReasonLookupForbidden || !strings.Contains(st.Message, "no RBAC rule allows it") || !strings.Contains(st.Message, "watchedGvks") {
		t.Errorf("status %+v, want %s naming the reason and the Helm value", st, lookup.ReasonLookupForbidden)
	}
}
