package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

const legacyPod = `
apiVersion: v1
kind: Pod
metadata: {name: legacy-billing-0, namespace: billing, labels: {tier: batch}}
spec:
  containers:
  - {name: app, image: vendor/app, securityContext: {privileged: true}}
`

func exceptionEngine(t *testing.T, clk *clocktesting.FakeClock, xs ...*core.Exception) *engine.Engine {
	t.Helper()
	e := engine.New(exprlang.New(exprlang.WithLimits(exprlang.Limits{Operations: 2000, Bytes: 1 << 20})), engine.WithClock(clk))
	r, err := e.Compile(newRule("no-privileged", "container.securityContext.privileged == true"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.Compile(newRule("other", "object.metadata.name == 'legacy-billing-0'"))
	if err != nil {
		t.Fatal(err)
	}
	e.SetRules([]*engine.Rule{r, other})
	var compiled []*engine.Exception
	for _, x := range xs {
		c, err := e.CompileException(x)
		if err != nil {
			t.Fatal(err)
		}
		compiled = append(compiled, c)
	}
	e.SetExceptions(compiled)
	return e
}

func legacyException() *core.Exception {
	return &core.Exception{
		Kind: "PortalException", Namespace: "billing", Name: "legacy",
		Rules:  []string{"no-privileged"},
		Match:  core.ExceptionMatch{GVKs: []core.GVK{{Version: "v1", Kind: "Pod"}}, Names: []string{"legacy-*"}},
		Reason: "vendor image needs privileged",
	}
}

// outcomes maps each rule's name to its outcome on the pod, and the
// exception a result names.
func outcomes(t *testing.T, e *engine.Engine, y string, mode core.Mode) (map[string]core.Outcome, map[string]string) {
	t.Helper()
	res, err := e.Evaluate(context.Background(), obj(t, y), engine.Options{Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	out, xs := map[string]core.Outcome{}, map[string]string{}
	for _, r := range res {
		out[r.Rule.Name] = r.Outcome
		if r.Exception != nil {
			xs[r.Rule.Name] = r.Exception.String()
		}
	}
	return out, xs
}

// TestExceptionSkipsOnlyTheNamedRuleOnMatchingObjects: the named rule is
// skipped on a pod whose name matches the glob, naming the exception; the
// other rule still fails; a pod of another name, or in another namespace
// (the exception is a PortalException of billing), still fails.
func TestExceptionSkipsOnlyTheNamedRuleOnMatchingObjects(t *testing.T) {
	e := exceptionEngine(t, clocktesting.NewFakeClock(time.Now()), legacyException())
	got, xs := outcomes(t, e, legacyPod, core.ModeAdmission)
	if got["no-privileged"] != core.OutcomeSkip || got["other"] != core.OutcomeFail {
		t.Fatalf("outcomes %v, want no-privileged skip and other fail", got)
	}
	if xs["no-privileged"] != "PortalException billing/legacy" {
		t.Fatalf("skip names %q", xs["no-privileged"])
	}
	for _, y := range []string{
		strings.Replace(legacyPod, "name: legacy-billing-0", "name: new-billing-0", 1),
		strings.Replace(legacyPod, "namespace: billing", "namespace: shop", 1),
	} {
		if got, _ := outcomes(t, e, y, core.ModeAdmission); got["no-privileged"] != core.OutcomeFail {
			t.Errorf("outcome %v on an object the exception does not match, want fail", got["no-privileged"])
		}
	}
}

// TestExceptionExpiresByTheClock: once the injected clock passes expires,
// the rule applies again, with no reload.
func TestExceptionExpiresByTheClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2027, 1, 30, 0, 0, 0, 0, time.UTC))
	x := legacyException()
	x.Expires = time.Date(2027, 1, 31, 0, 0, 0, 0, time.UTC)
	e := exceptionEngine(t, clk, x)
	if got, _ := outcomes(t, e, legacyPod, core.ModeAudit); got["no-privileged"] != core.OutcomeSkip {
		t.Fatalf("before expiry: %v, want skip", got["no-privileged"])
	}
	clk.SetTime(x.Expires)
	if got, _ := outcomes(t, e, legacyPod, core.ModeAudit); got["no-privileged"] != core.OutcomeFail {
		t.Fatalf("at expiry: %v, want fail", got["no-privileged"])
	}
}

// TestExceptionModesAndCondition: an exception limited to admission does
// not exempt in audit; one of mode actions keeps the failure but marks it,
// so no action runs; a false condition, and a condition that runs out of
// its budget, exempt nothing.
func TestExceptionModesAndCondition(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	x := legacyException()
	x.Modes = []core.Mode{core.ModeAdmission}
	e := exceptionEngine(t, clk, x)
	if got, _ := outcomes(t, e, legacyPod, core.ModeAudit); got["no-privileged"] != core.OutcomeFail {
		t.Errorf("admission-only exception in audit: %v, want fail", got["no-privileged"])
	}

	x = legacyException()
	x.Modes = []core.Mode{core.ModeActions}
	e = exceptionEngine(t, clk, x)
	res, err := e.Evaluate(context.Background(), obj(t, legacyPod), engine.Options{Mode: core.ModeAudit})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Rule.Name == "no-privileged" && (r.Outcome != core.OutcomeFail || r.Exception == nil || r.WantsVerdict()) {
			t.Errorf("actions-only exception: %s, exception %v, wants verdict %v; want a failure marked, with no verdict", r.Outcome, r.Exception, r.WantsVerdict())
		}
	}

	for cond, want := range map[string]core.Outcome{
		`object.metadata.labels["tier"] == "batch"`: core.OutcomeSkip,
		`object.metadata.labels["tier"] == "web"`:   core.OutcomeFail,
		`len(filter(1..100000, {# > 0})) > 0`:       core.OutcomeFail,
		`object.metadata.labels["tier"] + 1 == 2`:   core.OutcomeFail,
		`metadata.name startsWith "legacy-"`:        core.OutcomeSkip,
	} {
		x = legacyException()
		x.Condition = cond
		e = exceptionEngine(t, clk, x)
		if got, _ := outcomes(t, e, legacyPod, core.ModeAdmission); got["no-privileged"] != want {
			t.Errorf("condition %s: %v, want %v", cond, got["no-privileged"], want)
		}
	}
}

// TestExceptionRefusesWhatCannotBeBounded: a condition that reads cluster
// lookups or container, a selector that does not parse and a bad glob are
// refused at compile time.
func TestExceptionRefusesWhatCannotBeBounded(t *testing.T) {
	e := engine.New(exprlang.New())
	for name, mut := range map[string]func(*core.Exception){
		"container": func(x *core.Exception) { x.Condition = `container.name == "app"` },
		"selector": func(x *core.Exception) {
			x.Match.LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
		},
		"glob":    func(x *core.Exception) { x.Match.Names = []string{"[a-"} },
		"typo":    func(x *core.Exception) { x.Condition = `object.metadata.labelz == nil && containerz` },
		"no kind": func(x *core.Exception) { x.Match.GVKs = nil },
	} {
		x := legacyException()
		mut(x)
		if _, err := e.CompileException(x); err == nil {
			t.Errorf("%s: compiled, want an error", name)
		}
	}
}

// TestRuleChoosesWhichExceptionsApply: a rule's exceptions field decides
// who may write a hole in it. all: a PortalException of the object's
// namespace and a PortalClusterException both exempt; cluster: only the
// PortalClusterException; none: neither.
func TestRuleChoosesWhichExceptionsApply(t *testing.T) {
	tenant := legacyException()
	platform := legacyException()
	platform.Kind, platform.Namespace, platform.Name = "PortalClusterException", "", "platform"
	for _, c := range []struct {
		policy        core.ExceptionPolicy
		tenant, admin core.Outcome
	}{
		{core.ExceptionsAll, core.OutcomeSkip, core.OutcomeSkip},
		{"", core.OutcomeSkip, core.OutcomeSkip},
		{core.ExceptionsCluster, core.OutcomeFail, core.OutcomeSkip},
		{core.ExceptionsNone, core.OutcomeFail, core.OutcomeFail},
	} {
		for who, x := range map[string]*core.Exception{"PortalException": tenant, "PortalClusterException": platform} {
			e := engine.New(exprlang.New(), engine.WithClock(clocktesting.NewFakeClock(time.Now())))
			r := newRule("no-privileged", "container.securityContext.privileged == true")
			r.Exceptions = c.policy
			cr, err := e.Compile(r)
			if err != nil {
				t.Fatal(err)
			}
			e.SetRules([]*engine.Rule{cr})
			cx, err := e.CompileException(x)
			if err != nil {
				t.Fatal(err)
			}
			e.SetExceptions([]*engine.Exception{cx})
			got, _ := outcomes(t, e, legacyPod, core.ModeAdmission)
			want := c.tenant
			if who == "PortalClusterException" {
				want = c.admin
			}
			if got["no-privileged"] != want {
				t.Errorf("exceptions: %q, a %s: %s, want %s", c.policy, who, got["no-privileged"], want)
			}
		}
	}
}

// TestPortalExceptionConditionSeesTheNamespacedEvent: a PortalException's
// condition on a cluster runtime rule reads event.* as a PortalRule would,
// without other users' groups: whether it exempts cannot tell its author who
// else acted in the namespace. A PortalClusterException reads the full
// event.
func TestPortalExceptionConditionSeesTheNamespacedEvent(t *testing.T) {
	for _, c := range []struct {
		kind, namespace string
		masters, devs   core.Outcome
	}{
		{"PortalException", "billing", core.OutcomeFail, core.OutcomeFail},
		{"PortalClusterException", "", core.OutcomeSkip, core.OutcomeFail},
	} {
		e := engine.New(exprlang.New())
		r := newRule("exec-alert", "true")
		r.Modes = []core.Mode{core.ModeRuntime}
		r.Runtime.Events = []string{event.Any}
		cr, err := e.Compile(r)
		if err != nil {
			t.Fatal(err)
		}
		e.SetRules([]*engine.Rule{cr})
		x := legacyException()
		x.Kind, x.Namespace, x.Rules = c.kind, c.namespace, []string{"exec-alert"}
		x.Condition = `"system:masters" in event.user.groups`
		cx, err := e.CompileException(x)
		if err != nil {
			t.Fatal(err)
		}
		e.SetExceptions([]*engine.Exception{cx})
		for group, want := range map[string]core.Outcome{"system:masters": c.masters, "devs": c.devs} {
			full := event.Env(&event.Event{User: event.UserInfo{Username: "someone", Groups: []string{group}}}, []string{"exec"}, nil)
			res, err := e.Evaluate(context.Background(), obj(t, legacyPod), engine.Options{Mode: core.ModeRuntime, Event: full, RuntimeEvents: []string{"exec"},
				NamespacedEvent: func() map[string]any { return event.NamespacedEnv(full) }})
			if err != nil || len(res) != 1 {
				t.Fatalf("%s: %v %v", c.kind, res, err)
			}
			if res[0].Outcome != want {
				t.Errorf("a %s whose condition reads the groups, user in %s: %s, want %s", c.kind, group, res[0].Outcome, want)
			}
		}
	}
}
