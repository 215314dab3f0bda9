package admission_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/admission"
)

// decisions reads portal_admission_requests_total{decision}.
func decisions(decision string) float64 {
	return testutil.ToFloat64(env.portal.webhook.Metrics().Requests.WithLabelValues(decision))
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

func TestPrivilegedPodDenyWarnDryRun(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "adm-privileged"
	namespace(t, ns, nil)
	c, warns := warningClient(t)
	m := env.portal.webhook.Metrics()

	privileged := exampleRule(t, "baseline/privileged.yaml", ns) // pss-baseline-privileged
	team := simpleRule("adm-team-label", ns, podGVK, `object.metadata.labels?.team == nil`, "pods must carry a team label", "deny")
	putRule(t, "adm-privileged", privileged, "pods")
	putRule(t, "adm-team-label", team, "pods")

	// Deny: every denying result is listed, container-scoped ones with
	// their container.
	denied := decisions(admission.DecisionDenied)
	err := c.Create(ctx, pod(ns, "p1", true, true))
	if err == nil || !apierrors.IsForbidden(err) {
		t.Fatalf("privileged pod: want Forbidden, got %v", err)
	}
	want := []string{
		`[pss-baseline-privileged] PSS baseline (privileged): container "a" must not set securityContext.privileged=true (container: a)`,
		`[pss-baseline-privileged] PSS baseline (privileged): container "b" must not set securityContext.privileged=true (container: b)`,
		`[adm-team-label] pods must carry a team label`,
	}
	mustContain(t, "denial", err.Error(), want...)
	if strings.Contains(err.Error(), "team label (container") {
		t.Errorf("a rule that is not container-scoped names a container: %v", err)
	}
	t.Logf("denied: %v", err)
	if got := decisions(admission.DecisionDenied); got != denied+1 {
		t.Errorf("denied requests: got %v, want %v", got, denied+1)
	}

	// Server-side dry run takes the same path.
	err = c.Create(ctx, pod(ns, "p1", true, true), client.DryRunAll)
	if err == nil || !apierrors.IsForbidden(err) {
		t.Fatalf("dryRun=All: want Forbidden, got %v", err)
	}
	mustContain(t, "dry-run denial", err.Error(), want...)

	// Warn: admitted, and the client sees one warning per failing result.
	// The team rule in dryrun only counts.
	privileged.EnforcementAction, team.EnforcementAction = "warn", "dryrun"
	putRule(t, "adm-privileged", privileged, "pods")
	putRule(t, "adm-team-label", team, "pods")
	teamDryRun := testutil.ToFloat64(m.DryRunViolations.WithLabelValues("adm-team-label"))
	warns.take()
	if err := c.Create(ctx, pod(ns, "p2", true, false), client.DryRunAll); err != nil {
		t.Fatalf("dryRun=All with a warn rule: %v", err)
	}
	mustContain(t, "warnings", strings.Join(warns.take(), "\n"),
		`[pss-baseline-privileged] PSS baseline (privileged): container "a" must not set securityContext.privileged=true (container: a)`)
	if err := c.Create(ctx, pod(ns, "p2", true, true)); err != nil {
		t.Fatalf("warn rule denied: %v", err)
	}
	got := warns.take()
	mustContain(t, "warnings", strings.Join(got, "\n"), want[0], want[1])
	if strings.Contains(strings.Join(got, "\n"), "team") {
		t.Errorf("a dryrun rule produced a warning: %q", got)
	}
	if got := testutil.ToFloat64(m.DryRunViolations.WithLabelValues("adm-team-label")); got != teamDryRun+2 {
		t.Errorf("dryrun violations of adm-team-label: got %v, want %v", got, teamDryRun+2)
	}

	// Dryrun: admitted silently, counted once per failing container.
	privileged.EnforcementAction = "dryrun"
	putRule(t, "adm-privileged", privileged, "pods")
	before := testutil.ToFloat64(m.DryRunViolations.WithLabelValues("pss-baseline-privileged"))
	if err := c.Create(ctx, pod(ns, "p3", true, true)); err != nil {
		t.Fatalf("dryrun rule denied: %v", err)
	}
	if w := warns.take(); len(w) > 0 {
		t.Errorf("dryrun rules produced warnings: %q", w)
	}
	if got := testutil.ToFloat64(m.DryRunViolations.WithLabelValues("pss-baseline-privileged")); got != before+2 {
		t.Errorf("dryrun violations: got %v, want %v", got, before+2)
	}
}

func TestRequestFields(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "adm-request"
	namespace(t, ns, nil)
	c, warns := warningClient(t)
	putRule(t, "adm-frozen", simpleRule("adm-frozen", ns, configMapGVK,
		`request.operation == "UPDATE" && request.oldObject.metadata.labels?.frozen == "true"`,
		`{{ object.metadata.name }} is frozen`, "deny"), "configmaps")
	protectRule := simpleRule("adm-protected", ns, configMapGVK,
		`request.operation == "DELETE" && object.metadata.labels?.protected == "true"`,
		`{{ object.metadata.name }} is protected`, "deny")
	protectRule.Match.Operations = []policyv1alpha1.Operation{"DELETE"}
	putRule(t, "adm-protected", protectRule, "configmaps")
	putRule(t, "adm-dry-run-seen", simpleRule("adm-dry-run-seen", ns, configMapGVK,
		`request.dryRun && request.userInfo.username != "" && "system:masters" in request.userInfo.groups`,
		`dry run by {{ request.userInfo.username }}`, "warn"), "configmaps")

	// UPDATE sees the old object: a frozen map cannot change, not even to
	// unfreeze it, while freezing one is allowed.
	frozen := configMap(ns, "frozen", map[string]string{"frozen": "true"})
	if err := c.Create(ctx, frozen); err != nil {
		t.Fatalf("create: %v", err)
	}
	frozen.Data = map[string]string{"k": "v"}
	err := c.Update(ctx, frozen)
	if err == nil {
		t.Fatal("update of a frozen ConfigMap admitted")
	}
	mustContain(t, "denial", err.Error(), "[adm-frozen] frozen is frozen")
	frozen.Data, frozen.Labels = nil, nil
	if err := c.Update(ctx, frozen); err == nil {
		t.Fatal("unfreezing update admitted: the rule did not see the old object")
	}
	thawed := configMap(ns, "thawed", nil)
	if err := c.Create(ctx, thawed); err != nil {
		t.Fatal(err)
	}
	thawed.Labels = map[string]string{"frozen": "true"}
	if err := c.Update(ctx, thawed); err != nil {
		t.Fatalf("freezing update: %v", err)
	}

	// DELETE evaluates the old object.
	protected := configMap(ns, "protected", map[string]string{"protected": "true"})
	if err := c.Create(ctx, protected); err != nil {
		t.Fatal(err)
	}
	err = c.Delete(ctx, protected)
	if err == nil {
		t.Fatal("delete of a protected ConfigMap admitted")
	}
	mustContain(t, "denial", err.Error(), "[adm-protected] protected is protected")

	// request.dryRun and request.userInfo.
	warns.take()
	if err := c.Create(ctx, configMap(ns, "dry", nil), client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	w := strings.Join(warns.take(), "\n")
	mustContain(t, "warnings", w, "[adm-dry-run-seen] dry run by ")
	// A rejected request still carries the warnings of warn rules.
	frozen.Data = map[string]string{"k": "v2"}
	if err := c.Update(ctx, frozen, client.DryRunAll); err == nil {
		t.Fatal("dry-run update of a frozen ConfigMap admitted")
	}
	mustContain(t, "warnings of a denied request", strings.Join(warns.take(), "\n"), "[adm-dry-run-seen] dry run by ")
	if err := c.Create(ctx, configMap(ns, "wet", nil)); err != nil {
		t.Fatal(err)
	}
	if w := warns.take(); len(w) > 0 {
		t.Errorf("request.dryRun true on a real create: %q", w)
	}
}

func TestRuleErrorOnErrorDenyAndAllow(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "adm-onerror"
	namespace(t, ns, nil)
	c, warns := warningClient(t)
	m := env.portal.webhook.Metrics()
	spec := simpleRule("adm-broken", ns, configMapGVK, `int(object.metadata.name) > 0`, "never rendered", "deny")
	spec.OnError = "deny"
	putRule(t, "adm-broken", spec, "configmaps")

	err := c.Create(ctx, configMap(ns, "not-a-number", nil))
	if err == nil {
		t.Fatal("onError=deny: an erroring rule admitted the request")
	}
	mustContain(t, "denial", err.Error(), "[adm-broken] evaluation error: invalid operation: int(not-a-number)")
	if got := testutil.ToFloat64(m.RuleErrors.WithLabelValues("adm-broken", "deny")); got < 1 {
		t.Errorf("rule errors (deny) not counted: %v", got)
	}

	spec.OnError = "allow"
	putRule(t, "adm-broken", spec, "configmaps")
	warns.take()
	if err := c.Create(ctx, configMap(ns, "still-not-a-number", nil)); err != nil {
		t.Fatalf("onError=allow: %v", err)
	}
	mustContain(t, "warnings", strings.Join(warns.take(), "\n"), "[adm-broken] evaluation error: invalid operation: int(still-not-a-number)")
	if got := testutil.ToFloat64(m.RuleErrors.WithLabelValues("adm-broken", "allow")); got < 1 {
		t.Errorf("rule errors (allow) not counted: %v", got)
	}
	for _, onError := range []string{"deny", "allow"} {
		if len(env.logs.lines(`"msg":"admission rule evaluation failed"`, `"rule":"adm-broken"`, `"onError":"`+onError+`"`)) == 0 {
			t.Errorf("no log line for the evaluation error with onError=%s", onError)
		}
	}
}

func TestBypassNamespace(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	const ns = "adm-bypass"
	namespace(t, ns, map[string]string{admission.BypassAnnotation: "true"})
	putRule(t, "adm-bypass-privileged", simpleRule("adm-bypass-privileged", ns, podGVK,
		"container.securityContext.privileged == true", "no privileged containers", "deny"), "pods")
	eventually(t, "the cache to see the bypass annotation", func() bool {
		n := &corev1.Namespace{}
		return env.cache.Get(ctx, client.ObjectKey{Name: ns}, n) == nil && n.Annotations[admission.BypassAnnotation] == "true"
	})

	bypassed := testutil.ToFloat64(env.portal.webhook.Metrics().Bypass.WithLabelValues(ns))
	c, warns := warningClient(t)
	if err := c.Create(ctx, pod(ns, "break-glass", true)); err != nil {
		t.Fatalf("bypass namespace: %v", err)
	}
	mustContain(t, "warnings", strings.Join(warns.take(), "\n"), "portal: namespace adm-bypass is annotated portal.io/bypass=true: rules were not evaluated")
	if got := testutil.ToFloat64(env.portal.webhook.Metrics().Bypass.WithLabelValues(ns)); got != bypassed+1 {
		t.Errorf("portal_admission_bypass_total{namespace=%q}: got %v, want %v", ns, got, bypassed+1)
	}
	lines := env.logs.lines(`"msg":"admission bypassed"`, `"namespace":"adm-bypass"`, `"name":"break-glass"`,
		`"operation":"CREATE"`, `"kind":"Pod"`, `"user":"`)
	if len(lines) != 1 {
		t.Fatalf("want one audit line for the bypass, got %d:\n%s", len(lines), env.logs.String())
	}
	t.Logf("audit line: %s", lines[0])

	// Removing the annotation ends the bypass.
	n := &corev1.Namespace{}
	if err := env.client.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
		t.Fatal(err)
	}
	delete(n.Annotations, admission.BypassAnnotation)
	if err := env.client.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the privileged pod to be denied again", func() bool {
		err := env.client.Create(ctx, pod(ns, "no-glass", true), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "[adm-bypass-privileged] no privileged containers")
	})
}
