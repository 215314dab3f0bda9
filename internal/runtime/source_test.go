package runtime_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/runtime"
)

const execRules = `
apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata: {name: exec-in-prod}
spec:
  severity: high
  mode: [runtime]
  runtime: {events: [exec]}
  match: {gvk: [{group: "", version: v1, kind: Pod}], namespaces: {include: [prod]}}
  rule: event.user.serviceAccount != nil && object.metadata.labels.app == "web"
  message: '{{ event.user.username }} ran a command in {{ object.metadata.name }}'
  actions:
  - {type: label, key: portal.io/quarantine, value: "true"}
  - {type: revoke-sa-token}
`

const webPod = `
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: prod, uid: pod-uid-1, labels: {app: web}}
spec: {containers: [{name: web, image: nginx}]}
`

func execEvent(id, stage string) event.Event {
	ev := auditEvent(id, "system:serviceaccount:ci:deployer", "create", "pods", "exec", "prod", "web-0")
	ev.Stage = stage
	return ev
}

// drain runs the workers until evaluated events have been evaluated and
// the queue is empty.
func drain(t *testing.T, h *harness, evaluated float64) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = h.src.Start(ctx); close(done) }()
	err := wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return queued(t, h.metrics) == 0 && counter(t, h.metrics.Evaluated) >= evaluated, nil
	})
	if err != nil {
		t.Fatal("queue not drained")
	}
	cancel()
	<-done
}

// TestExecIsOneEvaluation: a kubectl exec arrives at ResponseStarted and at
// ResponseComplete (and RequestReceived with some policies); it is one
// finding, one verdict, against the live pod from the cache, acting on the
// pod and on the acting ServiceAccount.
func TestExecIsOneEvaluation(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	for _, st := range []string{event.StageRequestReceived, event.StageResponseStarted, event.StageResponseComplete} {
		h.src.Offer(runtime.InputWebhook, execEvent("a1", st))
	}
	drain(t, h, 1)
	if got := counter(t, h.metrics.Evaluated); got != 1 {
		t.Fatalf("evaluations = %v, want 1 (ResponseStarted only)", got)
	}
	key := core.ObjectKey{APIVersion: "v1", Kind: "Pod", Namespace: "prod", Name: "web-0"}
	if got := h.reports.rules(key); !slices.Equal(got, []string{"exec-in-prod"}) {
		t.Fatalf("open findings on the pod = %v", got)
	}
	if msg := h.reports.open[key][0].Message; msg != "system:serviceaccount:ci:deployer ran a command in web-0" {
		t.Errorf("message = %q", msg)
	}
	vs := h.verdicts.all()
	if len(vs) != 2 {
		t.Fatalf("verdicts = %+v, want one on the pod and one on the ServiceAccount", vs)
	}
	onPod, onSA := vs[0], vs[1]
	if onPod.Mode != core.ModeRuntime || onPod.Resource.UID != "pod-uid-1" || len(onPod.Rule.Actions) != 1 || onPod.Rule.Actions[0].Type != "label" {
		t.Errorf("verdict on the pod = %+v (rule actions %+v)", onPod, onPod.Rule.Actions)
	}
	if onSA.Resource != (core.ResourceRef{APIVersion: "v1", Kind: "ServiceAccount", Namespace: "ci", Name: "deployer", UID: "uid-of-system:serviceaccount:ci:deployer"}) ||
		len(onSA.Rule.Actions) != 1 || onSA.Rule.Actions[0].Type != "revoke-sa-token" {
		t.Errorf("verdict on the actor = %+v", onSA)
	}
}

// TestExecWithoutResponseStarted: an audit policy that omits
// ResponseStarted still gets the exec evaluated, once, at ResponseComplete.
func TestExecWithoutResponseStarted(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	h.src.Offer(runtime.InputWebhook, execEvent("b1", event.StageResponseComplete))
	drain(t, h, 1)
	if got := counter(t, h.metrics.Evaluated); got != 1 {
		t.Fatalf("evaluations = %v, want 1", got)
	}
}

// TestHumanExecRevokesNothing: a person's exec labels the pod but revokes
// no token: the credential was not a ServiceAccount's.
func TestHumanExecRevokesNothing(t *testing.T) {
	rules := `
mode: [runtime]
name: any-exec
runtime: {events: [exec]}
match: {gvk: [{group: "", kind: Pod}]}
rule: "true"
actions: [{type: revoke-sa-token}]
`
	h := newHarness(t, rules, []string{webPod}, runtime.Options{})
	ev := execEvent("c1", event.StageResponseStarted)
	ev.User.Username = "alice@example.com"
	h.src.Offer(runtime.InputWebhook, ev)
	drain(t, h, 1)
	if got := counter(t, h.metrics.Findings); got != 1 {
		t.Fatalf("findings = %v, want 1", got)
	}
	if vs := h.verdicts.all(); len(vs) != 0 {
		t.Fatalf("verdicts = %+v, want none", vs)
	}
}

// TestDedupPerRuleActorTarget: one rule, actor and target raise one
// finding per window; another actor or another target raise their own;
// after the window the same one raises again.
func TestDedupPerRuleActorTarget(t *testing.T) {
	other := `
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: prod, uid: pod-uid-2, labels: {app: web}}
spec: {containers: [{name: web, image: nginx}]}
`
	h := newHarness(t, execRules, []string{webPod, other}, runtime.Options{DedupWindow: time.Minute})
	ctx := t.Context()
	process := func(id, user, pod string) int {
		ev := auditEvent(id, user, "create", "pods", "exec", "prod", pod)
		ev.Stage = event.StageResponseStarted
		return len(h.src.Process(ctx, runtime.InputWebhook, &ev))
	}
	if n := process("1", "system:serviceaccount:ci:a", "web-0"); n != 1 {
		t.Fatalf("first exec raised %d", n)
	}
	if n := process("2", "system:serviceaccount:ci:a", "web-0"); n != 0 {
		t.Fatalf("same rule, actor and target within the window raised %d", n)
	}
	if n := process("3", "system:serviceaccount:ci:b", "web-0"); n != 1 {
		t.Fatalf("another actor raised %d", n)
	}
	if n := process("4", "system:serviceaccount:ci:a", "web-1"); n != 1 {
		t.Fatalf("another target raised %d", n)
	}
	h.clock.Step(time.Minute)
	if n := process("5", "system:serviceaccount:ci:a", "web-0"); n != 1 {
		t.Fatalf("after the window raised %d", n)
	}
	if got := counter(t, h.metrics.Deduplicated); got != 1 {
		t.Errorf("deduplicated = %v, want 1", got)
	}
}

// TestFindingsExpire: a runtime finding is open for its window, then the
// producer clears it, so its alert resolves and its report result goes;
// beyond the bound the oldest closes first.
func TestFindingsExpire(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{FindingWindow: 10 * time.Minute})
	ev := execEvent("e1", event.StageResponseStarted)
	h.src.Process(t.Context(), runtime.InputWebhook, &ev)
	key := core.ObjectKey{APIVersion: "v1", Kind: "Pod", Namespace: "prod", Name: "web-0"}
	h.clock.Step(9 * time.Minute)
	h.src.Expire(h.clock.Now())
	if len(h.reports.rules(key)) != 1 {
		t.Fatal("closed before its window ended")
	}
	h.clock.Step(time.Minute)
	h.src.Expire(h.clock.Now())
	if got := h.reports.rules(key); len(got) != 0 || h.src.OpenFindings() != 0 {
		t.Fatalf("still open after the window: %v", got)
	}
}

// secretReadRule raises a runtime finding on every Secret read.
const secretReadRule = `
mode: [runtime]
name: secret-read
runtime: {events: [secret-read]}
match: {gvk: [{group: "", kind: Secret}]}
rule: "true"
`

func TestOpenFindingsBounded(t *testing.T) {
	h := newHarness(t, secretReadRule, nil, runtime.Options{MaxOpenFindings: 3})
	for i := range 5 {
		ev := auditEvent("s", "bob", "get", "secrets", "", "prod", "s"+string(rune('0'+i)))
		h.src.Process(t.Context(), runtime.InputWebhook, &ev)
	}
	if got := h.src.OpenFindings(); got != 3 {
		t.Fatalf("open = %d, want 3", got)
	}
	if got := counter(t, h.metrics.Expired.WithLabelValues("capacity")); got != 2 {
		t.Errorf("closed for capacity = %v, want 2", got)
	}
	if len(h.reports.rules(core.ObjectKey{APIVersion: "v1", Kind: "Secret", Namespace: "prod", Name: "s0"})) != 0 {
		t.Error("the oldest finding is still open")
	}
}

// TestOneNamespaceFloodClosesItsOwnFindings: open findings are bounded
// for the whole process, and a tenant's flood of events in its namespace
// (a rule: true, 404 probes that are still audited) closed every other
// namespace's oldest findings first. Past the bound, the namespace holding
// the most gives way.
func TestOneNamespaceFloodClosesItsOwnFindings(t *testing.T) {
	h := newHarness(t, secretReadRule, nil, runtime.Options{MaxOpenFindings: 4})
	for i := range 2 {
		ev := auditEvent("p", "bob", "get", "secrets", "", "prod", "p"+string(rune('0'+i)))
		h.src.Process(t.Context(), runtime.InputWebhook, &ev)
	}
	for i := range 20 {
		ev := auditEvent("f", "mallory", "get", "secrets", "", "tenant", "f"+string(rune('a'+i)))
		h.src.Process(t.Context(), runtime.InputWebhook, &ev)
	}
	if got := h.src.OpenFindings(); got != 4 {
		t.Fatalf("open = %d, want the bound of 4", got)
	}
	for i := range 2 {
		key := core.ObjectKey{APIVersion: "v1", Kind: "Secret", Namespace: "prod", Name: "p" + string(rune('0'+i))}
		if len(h.reports.rules(key)) == 0 {
			t.Errorf("prod's finding on %s was closed by another namespace's flood", key.Name)
		}
	}
}

// TestQueueFullDropsAndCounts: with no worker running, events beyond the
// queue are dropped and counted, and Offer returns at once.
func TestQueueFullDropsAndCounts(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{QueueSize: 2})
	var queued int
	for i := range 5 {
		if h.src.Offer(runtime.InputWebhook, execEvent(string(rune('a'+i)), event.StageResponseStarted)) {
			queued++
		}
	}
	if queued != 2 {
		t.Fatalf("queued %d, want 2", queued)
	}
	if got := counter(t, h.metrics.Dropped.WithLabelValues(runtime.InputWebhook, runtime.DropQueueFull)); got != 3 {
		t.Fatalf("dropped = %v, want 3", got)
	}
}

// TestOneNamespaceFloodKeepsOthersDeduplicated: a tenant making requests
// that each fail a rule with a new actor or target fills the
// deduplication keys; past the bound its own keys give way, so another
// namespace's exec within the window still raises no second finding and
// runs no action again.
func TestOneNamespaceFloodKeepsOthersDeduplicated(t *testing.T) {
	rules := `
mode: [runtime]
name: any-exec
runtime: {events: [exec]}
match: {gvk: [{group: "", kind: Pod}]}
rule: "true"
actions:
- {type: label, key: portal.io/quarantine, value: "true"}
`
	h := newHarness(t, rules, []string{webPod}, runtime.Options{CacheSize: 8})
	exec := func(user, ns, pod string) int {
		ev := auditEvent("x", user, "create", "pods", "exec", ns, pod)
		ev.Stage = event.StageResponseStarted
		return len(h.src.Process(t.Context(), runtime.InputWebhook, &ev))
	}
	for _, pod := range []string{"web-0", "web-1"} {
		if n := exec("system:serviceaccount:ci:deployer", "prod", pod); n != 1 {
			t.Fatalf("prod's first exec into %s raised %d", pod, n)
		}
	}
	for i := range 50 {
		if n := exec(fmt.Sprintf("system:serviceaccount:tenant:sa-%d", i), "tenant", "pod"); n != 1 {
			t.Fatalf("tenant exec %d raised %d", i, n)
		}
	}
	for _, pod := range []string{"web-0", "web-1"} {
		if n := exec("system:serviceaccount:ci:deployer", "prod", pod); n != 0 {
			t.Errorf("prod's exec into %s again within the window raised %d: another namespace's flood evicted its key", pod, n)
		}
	}
	if got := len(h.verdicts.all()); got != 52 {
		t.Errorf("verdicts = %d, want 52 (prod's two once, the tenant's 50)", got)
	}
	// The tenant's own oldest keys gave way.
	if n := exec("system:serviceaccount:tenant:sa-0", "tenant", "pod"); n != 1 {
		t.Errorf("the tenant's oldest key was kept past the bound: %d", n)
	}
}

// TestLongRunningRequestsRememberedPerNamespace: an exec evaluated when
// its stream opened is not evaluated again when it ends, however many
// long-running requests others make meanwhile: a tenant's open watches
// evict its own, and requests that ended are forgotten at once.
func TestLongRunningRequestsRememberedPerNamespace(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{CacheSize: 8})
	watch := func(id, ns, stage string) event.Event {
		ev := auditEvent(id, "system:serviceaccount:"+ns+":reader", "watch", "secrets", "", ns, "")
		ev.Stage = stage
		return ev
	}
	h.src.Offer(runtime.InputWebhook, execEvent("exec-1", event.StageResponseStarted))
	// Watches in prod that end: nothing to remember once they have.
	for i := range 20 {
		h.src.Offer(runtime.InputWebhook, watch(fmt.Sprint("p", i), "prod", event.StageResponseStarted))
		h.src.Offer(runtime.InputWebhook, watch(fmt.Sprint("p", i), "prod", event.StageResponseComplete))
	}
	// A tenant's watches held open.
	for i := range 50 {
		h.src.Offer(runtime.InputWebhook, watch(fmt.Sprint("t", i), "tenant", event.StageResponseStarted))
	}
	before := queued(t, h.metrics)
	h.src.Offer(runtime.InputWebhook, execEvent("exec-1", event.StageResponseComplete))
	if got := queued(t, h.metrics); got != before {
		t.Errorf("the exec's ResponseComplete was queued for a second evaluation: its ResponseStarted was forgotten")
	}
	if got, want := before, float64(1+20+50); got != want {
		t.Errorf("queued = %v, want %v (each request once, at ResponseStarted)", got, want)
	}
}
