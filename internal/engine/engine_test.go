package engine_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

var podGVK = []core.GVK{{Version: "v1", Kind: "Pod"}, {Group: "apps", Kind: "Deployment"}}

func newRule(name, expr string) *core.Rule {
	return &core.Rule{
		Name: name, Enabled: true, Severity: core.SeverityHigh,
		Modes:             []core.Mode{core.ModeAdmission, core.ModeAudit},
		EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny,
		Match: core.Match{GVKs: podGVK}, Expression: expr,
	}
}

func load(t *testing.T, rules ...*core.Rule) *engine.Engine {
	t.Helper()
	e := engine.New(exprlang.New())
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

func obj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

const twoBadContainers = `
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: prod, labels: {app: web}}
spec:
  initContainers: [{name: init, image: busybox, securityContext: {privileged: true}}]
  containers:
  - {name: ok, image: "nginx:1.27"}
  - {name: bad, image: nginx, securityContext: {privileged: true}}
  ephemeralContainers: [{name: debug, image: busybox}]
`

func evaluate(t *testing.T, e *engine.Engine, o *unstructured.Unstructured) []core.Result {
	t.Helper()
	res, err := e.Evaluate(context.Background(), o, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestContainerScopedRuleReportsEachFailingContainer(t *testing.T) {
	r := newRule("privileged", "container.securityContext.privileged == true")
	r.Message = "{{ container.containerType }} {{ container.name }} is privileged"
	res := evaluate(t, load(t, r), obj(t, twoBadContainers))
	var got []string
	for _, x := range res {
		if x.Outcome != core.OutcomeFail {
			t.Fatalf("unexpected %s: %+v", x.Outcome, x)
		}
		got = append(got, x.Container+"/"+x.ContainerType+": "+x.Message)
	}
	want := "bad/container: container bad is privileged,init/initContainer: initContainer init is privileged"
	if strings.Join(got, ",") != want {
		t.Fatalf("got %q\nwant %q", strings.Join(got, ","), want)
	}
}

func TestEphemeralContainersAreEvaluated(t *testing.T) {
	res := evaluate(t, load(t, newRule("no-busybox", `container.image.name == "library/busybox"`)), obj(t, twoBadContainers))
	var names []string
	for _, x := range res {
		names = append(names, x.Container)
	}
	if strings.Join(names, ",") != "init,debug" {
		t.Fatalf("failing containers %v, want init and debug", names)
	}
}

func TestPassingRuleYieldsOnePass(t *testing.T) {
	res := evaluate(t, load(t, newRule("no-root", "container.securityContext.runAsUser == 0")), obj(t, twoBadContainers))
	if len(res) != 1 || res[0].Outcome != core.OutcomePass || res[0].Container != "" {
		t.Fatalf("want a single pass, got %+v", res)
	}
}

func TestTemplatedKindsAreEvaluatedOnTheirPod(t *testing.T) {
	deploy := obj(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: prod}
spec:
  template:
    metadata: {labels: {team: a}}
    spec:
      hostNetwork: true
      containers: [{name: c, image: "registry.example.com:5000/app@sha256:abc"}]
`)
	e := load(t,
		newRule("host-network", "spec.hostNetwork == true"),
		newRule("team-label", `metadata.labels.team != "a" || metadata.name != "d"`),
		newRule("digest", `container.image.registry == "registry.example.com:5000" && container.image.sha256 == "abc" && container.image.tag == ""`),
	)
	outcomes := map[string]core.Outcome{}
	for _, r := range evaluate(t, e, deploy) {
		outcomes[r.Rule.Name] = r.Outcome
	}
	want := map[string]core.Outcome{"host-network": core.OutcomeFail, "team-label": core.OutcomePass, "digest": core.OutcomeFail}
	for k, v := range want {
		if outcomes[k] != v {
			t.Errorf("%s: %s, want %s", k, outcomes[k], v)
		}
	}
}

func TestNilIsPassAndNonBoolIsError(t *testing.T) {
	e := load(t, newRule("nil", "object.spec?.missing?.field"), newRule("string", `object.metadata.name`), newRule("fetch", "object.spec.missing.field"))
	got := map[string]core.Outcome{}
	for _, r := range evaluate(t, e, obj(t, twoBadContainers)) {
		got[r.Rule.Name] = r.Outcome
		if r.Outcome == core.OutcomeError && r.Message == "" {
			t.Errorf("%s: error without message", r.Rule.Name)
		}
	}
	want := map[string]core.Outcome{"nil": core.OutcomePass, "string": core.OutcomeError, "fetch": core.OutcomeError}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s", k, got[k], v)
		}
	}
}

// A rule whose type is known at load and is not a boolean cannot decide
// anything: it is refused with a hint, instead of loading Ready and then
// reporting an error on every object it matches.
func TestNonBooleanRuleIsRefusedAtLoad(t *testing.T) {
	e := engine.New(exprlang.New())
	for expr, want := range map[string]string{
		`container.image.tag`:                        `but container.image.tag is a string: compare it, as in container.image.tag == "value"`,
		`securityContext.runAsUser`:                  `but securityContext.runAsUser is a number: compare it, as in securityContext.runAsUser > 0`,
		`container.securityContext.capabilities.add`: `is a list: compare it, as in "value" in container.securityContext.capabilities.add`,
		`"yes"`:                "the rule must evaluate to a boolean (true flags the object), but it is a string",
		`len(object.spec)`:     "but it is a number",
		`object`:               "but it is a map",
		`upper(metadata.name)`: "but it is a string",
	} {
		_, err := e.Compile(newRule("r", expr))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", expr, err, want)
		}
	}
	for _, expr := range []string{`container.securityContext.privileged`, `spec.hostNetwork`, `object.spec.x`, `container.image.tag == "latest"`, `object.metadata.name`} {
		if _, err := e.Compile(newRule("r", expr)); err != nil {
			t.Errorf("%s: %v, want it to load (a boolean, or a type only the object decides)", expr, err)
		}
	}
}

func TestPathologicalRuleErrorsInsteadOfHanging(t *testing.T) {
	e := load(t, newRule("loop", "all(1..100000, {all(1..100000, {# > 0})})"))
	res := evaluate(t, e, obj(t, twoBadContainers))
	if len(res) != 1 || res[0].Outcome != core.OutcomeError || !res[0].Denies() {
		t.Fatalf("want one denying error, got %+v", res)
	}
}

func TestMatching(t *testing.T) {
	pod := obj(t, twoBadContainers)
	tests := []struct {
		name  string
		edit  func(*core.Rule)
		opts  engine.Options
		match bool
	}{
		{"all", func(*core.Rule) {}, engine.Options{}, true},
		{"include glob", func(r *core.Rule) { r.Match.Namespaces.Include = []string{"pr*"} }, engine.Options{}, true},
		{"include other", func(r *core.Rule) { r.Match.Namespaces.Include = []string{"dev"} }, engine.Options{}, false},
		{"exclude", func(r *core.Rule) { r.Match.Namespaces.Exclude = []string{"prod"} }, engine.Options{}, false},
		{"portalrule own ns", func(r *core.Rule) { r.Namespace = "prod" }, engine.Options{}, true},
		{"portalrule other ns", func(r *core.Rule) { r.Namespace = "dev" }, engine.Options{}, false},
		{"labels", func(r *core.Rule) {
			r.Match.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		}, engine.Options{}, true},
		{"labels miss", func(r *core.Rule) {
			r.Match.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
		}, engine.Options{}, false},
		{"version", func(r *core.Rule) { r.Match.GVKs = []core.GVK{{Version: "v2", Kind: "Pod"}} }, engine.Options{}, false},
		{"disabled", func(r *core.Rule) { r.Enabled = false }, engine.Options{}, false},
		{"mode", func(r *core.Rule) { r.Modes = []core.Mode{core.ModeAudit} }, engine.Options{Mode: core.ModeAdmission}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRule("r", "true")
			tt.edit(r)
			res, err := load(t, r).Evaluate(context.Background(), pod, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(res) > 0; got != tt.match {
				t.Fatalf("matched = %v, want %v", got, tt.match)
			}
		})
	}
}

func TestCompileRejectsPodSugarOnOtherKinds(t *testing.T) {
	r := newRule("cm", `container.name == "x"`)
	r.Match.GVKs = []core.GVK{{Version: "v1", Kind: "ConfigMap"}}
	_, err := engine.New(exprlang.New()).Compile(r)
	if err == nil || !strings.Contains(err.Error(), "ConfigMap") {
		t.Fatalf("want an error naming ConfigMap, got %v", err)
	}
}

func TestRequestIsBound(t *testing.T) {
	e := load(t, newRule("update-only", `request.operation == "UPDATE" && request.oldObject.metadata.name == "p"`))
	pod := obj(t, twoBadContainers)
	res, err := e.Evaluate(context.Background(), pod, engine.Options{Request: &core.Request{Operation: "UPDATE", OldObject: pod.Object}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Outcome != core.OutcomeFail {
		t.Fatalf("got %+v", res)
	}
	if res := evaluate(t, e, pod); res[0].Outcome != core.OutcomePass {
		t.Fatalf("without a request the rule must see an empty one: %+v", res)
	}
}

func TestMessageTemplateErrorsStayInTheMessage(t *testing.T) {
	r := newRule("msg", "true")
	r.Message = "bad field {{ object.spec.nope.deeper }} here"
	res := evaluate(t, load(t, r), obj(t, twoBadContainers))
	if res[0].Outcome != core.OutcomeFail || !strings.HasPrefix(res[0].Message, "bad field <error:") {
		t.Fatalf("got %+v", res[0])
	}
	r.Message = "unclosed {{ object"
	if _, err := engine.New(exprlang.New()).Compile(r); err == nil {
		t.Fatal("unclosed template compiled")
	}
}

// Kinds only namespaced rules match are admitted in those namespaces only;
// a cluster-wide rule on a kind makes it cluster-wide.
func TestGVKNamespaces(t *testing.T) {
	cm := core.GVK{Kind: "ConfigMap"}
	secret := core.GVK{Kind: "Secret"}
	inNS := func(name, ns string, gvks ...core.GVK) *core.Rule {
		r := newRule(name, "true")
		r.Namespace, r.Match.GVKs = ns, gvks
		return r
	}
	auditOnly := inNS("audit-only", "team-c", secret)
	auditOnly.Modes = []core.Mode{core.ModeAudit}
	e := load(t,
		inNS("b-cm", "team-b", cm),
		inNS("a-cm", "team-a", cm, secret),
		inNS("a-cm-again", "team-a", cm),
		inNS("b-pods", "team-b", podGVK...),
		newRule("cluster-pods", "true"),
		auditOnly,
	)
	got := e.GVKNamespaces(core.ModeAdmission)
	want := map[core.GVK][]string{
		cm:        {"team-a", "team-b"},
		secret:    {"team-a"},
		podGVK[0]: nil,
		podGVK[1]: nil,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for g, ns := range want {
		if v, ok := got[g]; !ok || strings.Join(v, ",") != strings.Join(ns, ",") || (ns == nil) != (v == nil) {
			t.Errorf("%v: got %v (present %v), want %v", g, v, ok, ns)
		}
	}
}

// TestEvaluateAppendReusesTheSlice: with room for a result per candidate
// rule, EvaluateAppend writes into dst's array (what portal eval's workers
// rely on to allocate one slice each) and gives what Evaluate gives.
func TestEvaluateAppendReusesTheSlice(t *testing.T) {
	e := load(t, newRule("privileged", "container.securityContext.privileged == true"), newRule("named", `metadata.name == "p"`))
	o := obj(t, twoBadContainers)
	want := evaluate(t, e, o)
	dst := make([]core.Result, 1, 8)
	got, err := e.EvaluateAppend(context.Background(), o, engine.Options{}, dst)
	if err != nil {
		t.Fatal(err)
	}
	if &got[0] != &dst[:1][0] {
		t.Error("EvaluateAppend did not write into dst's array")
	}
	if len(got) != len(want) {
		t.Fatalf("EvaluateAppend gave %d results, Evaluate %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Rule != want[i].Rule || got[i].Outcome != want[i].Outcome || got[i].Container != want[i].Container || got[i].Message != want[i].Message {
			t.Errorf("result %d: EvaluateAppend %+v, Evaluate %+v", i, got[i], want[i])
		}
	}
}
