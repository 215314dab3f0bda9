package manager

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/testlog"
)

// The namespaces of the exception tests: PortalExceptions are honoured in
// exc-* (--exception-namespaces), not in noexc-tenant.
const (
	excBilling = "exc-billing"
	excShop    = "exc-shop"
	excTenant  = "noexc-tenant"
)

// excMaxDuration is the test's --exception-max-duration.
const excMaxDuration = 30 * 24 * time.Hour

const excRule = `name: exc-no-privileged
severity: high
mode: [admission, audit]
enforcementAction: deny
match: {gvk: [{kind: Pod}], namespaces: {include: [exc-billing, exc-shop, noexc-tenant]}}
rule: object.metadata.labels?.privileged == "yes"
message: privileged pod
`

// warnings collects the warnings the API server returns to a client.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}

// excEnv is a running Portal with admission, audit and the PolicyReport
// sink, on a fake clock, and what the test reads of it.
type excEnv struct {
	t     *testing.T
	c     client.Client
	warn  *warnings
	dyn   dynamic.Interface
	clock *clocktesting.FakeClock
	reg   *prometheus.Registry
	logs  *testlog.Buffer
}

func startExceptionPortal(t *testing.T) *excEnv {
	t.Helper()
	cl := shared.Cluster(t)
	c := clusterClient(t, cl, "exc-portal", excBilling, excShop, excTenant)
	cfg, reg, _ := layerConfig(t, "exceptions")
	cfg.Namespace = "exc-portal"
	cfg.Admission.Enabled = true
	cfg.Audit.Enabled = true
	cfg.Audit.ResyncPeriod = time.Hour
	if err := cfg.Sinks.Parse("--report-format=wgpolicyk8s"); err != nil {
		t.Fatal(err)
	}
	cfg.ExceptionNamespaces = []string{"exc-*"}
	cfg.ExceptionMaxDuration = excMaxDuration
	// The API server keeps expires in real time: the fake clock starts
	// there, and the test moves it.
	clk := clocktesting.NewFakeClock(time.Now())
	cfg.Clock = clk
	cfg.RulesFolder = t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg.RulesFolder, "rule.yaml"), []byte(excRule), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	t.Cleanup(func() {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfg.Admission.ConfigName}}
		if err := c.Delete(context.Background(), vwc); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	runUntilReady(t, cl, cfg)

	w := &warnings{}
	rc := rest.CopyConfig(cl.Config)
	rc.WarningHandlerWithContext = w
	wc, err := client.New(rc, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	e := &excEnv{t: t, c: wc, warn: w, dyn: dynamic.NewForConfigOrDie(cl.Config), clock: clk, reg: reg, logs: logs}
	e.poll("the webhook deciding pods", func() bool {
		err := wc.Create(context.Background(), privileged(excShop, "probe"), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "privileged pod")
	})
	return e
}

func privileged(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"privileged": "yes"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
}

func (e *excEnv) poll(what string, cond func() bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		e.t.Fatalf("waiting for %s: %v\n%s", what, err, e.logs.String())
	}
}

func (e *excEnv) create(obj client.Object) {
	e.t.Helper()
	if err := e.c.Create(context.Background(), obj); err != nil {
		e.t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// ready returns the Ready condition of a PortalException, nil until set.
func (e *excEnv) ready(x *policyv1alpha1.PortalException) (*metav1.Condition, *policyv1alpha1.PortalException) {
	got := &policyv1alpha1.PortalException{}
	if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(x), got); err != nil {
		return nil, got
	}
	if got.Status.ObservedGeneration != got.Generation {
		return nil, got
	}
	return meta.FindStatusCondition(got.Status.Conditions, policyv1alpha1.ConditionReady), got
}

func (e *excEnv) waitReady(x *policyv1alpha1.PortalException, status metav1.ConditionStatus, reason string) *policyv1alpha1.PortalException {
	e.t.Helper()
	var got *policyv1alpha1.PortalException
	e.poll(fmt.Sprintf("%s Ready %s/%s", x.Name, status, reason), func() bool {
		var c *metav1.Condition
		c, got = e.ready(x)
		return c != nil && c.Status == status && c.Reason == reason
	})
	return got
}

// reportResult returns the result and properties.exception of the audit
// report entry for pod ns/name, "" until there is one.
func (e *excEnv) reportResult(ns, name string) (string, string) {
	l, err := e.dyn.Resource(policyReportGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return "", ""
	}
	for _, r := range l.Items {
		results, _, _ := unstructured.NestedSlice(r.Object, "results")
		for _, x := range results {
			m, _ := x.(map[string]any)
			refs, _ := m["resources"].([]any)
			if len(refs) == 0 || m["policy"] != "exc-no-privileged" {
				continue
			}
			if ref, _ := refs[0].(map[string]any); ref["name"] == name {
				props, _ := m["properties"].(map[string]any)
				exc, _ := props["exception"].(string)
				res, _ := m["result"].(string)
				return res, exc
			}
		}
	}
	return "", ""
}

func (e *excEnv) denied(ns, name string) bool {
	err := e.c.Create(context.Background(), privileged(ns, name), client.DryRunAll)
	return err != nil && strings.Contains(err.Error(), "privileged pod")
}

// TestExceptionsAgainstTheAPIServer runs admission and audit with
// exceptions against a real API server. A matching PortalException admits
// a pod its rule would refuse, with a warning naming it, and audit reports
// the pod as skip with properties.exception, and the exception's status
// counts it as exempted; the same pod in another
// namespace is refused. Once the clock passes expires, admission refuses at
// once, audit reports fail, and the status says Expired with an Event. A
// PortalException outside --exception-namespaces is refused in its status
// and exempts nothing; a hostile one (a huge selector, a condition that
// runs out of budget) is refused or does not apply, like a rule.
func TestExceptionsAgainstTheAPIServer(t *testing.T) {
	e := startExceptionPortal(t)
	expires := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	legacy := &policyv1alpha1.PortalException{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: excBilling},
		Spec: policyv1alpha1.ExceptionSpec{
			Rules:   []string{"exc-no-privileged", "not-a-rule"},
			Match:   policyv1alpha1.ExceptionMatch{GVK: []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "Pod"}}, Names: []string{"legacy-*"}},
			Reason:  "vendor image needs privileged until its next release",
			Expires: &metav1.Time{Time: expires},
		},
	}
	e.create(legacy)
	// A tenant's exception on Secrets would tell its author, through what
	// it exempts, what they hold: the API server refuses it.
	peek := legacy.DeepCopy()
	peek.Name, peek.Spec.Match.GVK = "peek", []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "Secret"}}
	if err := e.c.Create(context.Background(), peek, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "PortalExceptions cannot match Secrets") {
		t.Errorf("a PortalException on Secrets: %v, want the CRD's refusal", err)
	}
	got := e.waitReady(legacy, metav1.ConditionTrue, policyv1alpha1.ReasonExceptionActive)
	e.poll("matchedRules", func() bool {
		_, got = e.ready(legacy)
		return slices.Equal(got.Status.MatchedRules, []string{"exc-no-privileged"})
	})

	// Admission: admitted with a warning, in the exception's namespace only.
	e.warn.take()
	e.create(privileged(excBilling, "legacy-0"))
	if w := strings.Join(e.warn.take(), "\n"); !strings.Contains(w, "exempted by PortalException exc-billing/legacy: vendor image") {
		t.Errorf("warnings %q, want the exception named", w)
	}
	if !e.denied(excShop, "legacy-0") {
		t.Errorf("a pod in %s was admitted: the exception of %s must not apply there", excShop, excBilling)
	}
	if !e.denied(excBilling, "new-0") {
		t.Errorf("a pod whose name the exception does not match was admitted")
	}

	// Audit: skip, naming the exception.
	e.poll("audit reporting skip", func() bool {
		res, exc := e.reportResult(excBilling, "legacy-0")
		return res == "skip" && exc == "PortalException exc-billing/legacy"
	})
	e.poll("status.exemptedCount 1", func() bool {
		_, got = e.ready(legacy)
		return got.Status.ExemptedCount == 1
	})
	if n := testutil.ToFloat64(mustCounter(t, e.reg, "portal_exceptions_applied_total", "exc-billing/legacy", "exc-no-privileged")); n < 2 {
		t.Errorf("portal_exceptions_applied_total = %v, want admission and audit counted", n)
	}

	// Expiry: admission refuses as soon as the clock passes it; audit
	// reports fail; the status and an Event say Expired.
	e.clock.SetTime(expires)
	if !e.denied(excBilling, "legacy-1") {
		t.Errorf("the expired exception still admits")
	}
	e.poll("audit reporting fail after expiry", func() bool {
		res, exc := e.reportResult(excBilling, "legacy-0")
		return res == "fail" && exc == ""
	})
	got = e.waitReady(legacy, metav1.ConditionFalse, policyv1alpha1.ReasonExpired)
	if c := meta.FindStatusCondition(got.Status.Conditions, policyv1alpha1.ConditionExpired); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Expired condition %+v, want True", c)
	}
	e.poll("the Expired event", func() bool { return e.hasEvent(excBilling, "legacy", policyv1alpha1.ReasonExpired) })
	e.poll("status.exemptedCount 0", func() bool {
		_, got = e.ready(legacy)
		return got.Status.ExemptedCount == 0
	})

	// Outside --exception-namespaces: refused, and nothing is exempted.
	tenant := legacy.DeepCopy()
	tenant.ObjectMeta = metav1.ObjectMeta{Name: "self-service", Namespace: excTenant}
	tenant.Spec.Expires = nil
	e.create(tenant)
	e.waitReady(tenant, metav1.ConditionFalse, policyv1alpha1.ReasonNamespaceNotAllowed)
	if c, _ := e.ready(tenant); !strings.Contains(c.Message, "--exception-namespaces") {
		t.Errorf("status message %q does not say why", c.Message)
	}
	if !e.denied(excTenant, "legacy-0") {
		t.Errorf("a PortalException outside --exception-namespaces exempted a pod")
	}

	// Hostile: a selector past the bounds is refused; a condition that
	// runs out of its budget does not apply.
	huge := legacy.DeepCopy()
	huge.ObjectMeta = metav1.ObjectMeta{Name: "huge-selector", Namespace: excBilling}
	huge.Spec.Expires = nil
	huge.Spec.Match.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := range 40 {
		huge.Spec.Match.LabelSelector.MatchLabels[fmt.Sprintf("k%d", i)] = "v"
	}
	e.create(huge)
	e.waitReady(huge, metav1.ConditionFalse, policyv1alpha1.ReasonInvalidException)

	costly := legacy.DeepCopy()
	costly.ObjectMeta = metav1.ObjectMeta{Name: "costly", Namespace: excBilling}
	costly.Spec.Expires = &metav1.Time{Time: time.Now().Add(time.Hour)}
	costly.Spec.Match.Names = []string{"costly-*"}
	costly.Spec.Condition = `len(filter(1..100000000, {# > 0})) > 0`
	e.create(costly)
	e.waitReady(costly, metav1.ConditionTrue, policyv1alpha1.ReasonExceptionActive)
	if !e.denied(excBilling, "costly-0") {
		t.Errorf("an exception whose condition ran out of budget exempted a pod")
	}
	if n := testutil.ToFloat64(mustCounter(t, e.reg, "portal_exception_condition_errors_total", "exc-billing/costly")); n < 1 {
		t.Errorf("portal_exception_condition_errors_total = %v, want the failed condition counted", n)
	}

	// --exception-max-duration: a PortalException that never expires, or
	// expires past the bound after its creation, is refused and exempts
	// nothing; a PortalClusterException is not bound.
	for name, expires := range map[string]*metav1.Time{"forever": nil, "too-late": {Time: time.Now().Add(excMaxDuration + 24*time.Hour)}} {
		x := legacy.DeepCopy()
		x.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: excBilling}
		x.Spec.Expires = expires
		x.Spec.Match.Names = []string{name + "-*"}
		e.create(x)
		e.waitReady(x, metav1.ConditionFalse, policyv1alpha1.ReasonExpiresTooLate)
		if c, _ := e.ready(x); !strings.Contains(c.Message, "--exception-max-duration") || !strings.Contains(c.Message, "on or before") {
			t.Errorf("%s: status message %q does not say the bound and the latest expiry", name, c.Message)
		}
		if !e.denied(excBilling, name+"-0") {
			t.Errorf("%s: a PortalException past --exception-max-duration exempted a pod", name)
		}
	}
	platform := &policyv1alpha1.PortalClusterException{
		ObjectMeta: metav1.ObjectMeta{Name: "exc-platform-forever"},
		Spec:       legacy.Spec,
	}
	platform.Spec.Expires = nil
	platform.Spec.Match.Names = []string{"platform-*"}
	e.create(platform)
	e.poll("a PortalClusterException without expires Ready", func() bool {
		var got policyv1alpha1.PortalClusterException
		if err := e.c.Get(context.Background(), client.ObjectKeyFromObject(platform), &got); err != nil {
			return false
		}
		c := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == policyv1alpha1.ReasonExceptionActive
	})
}

// hasEvent reports whether an Event with reason names the exception.
func (e *excEnv) hasEvent(ns, name, reason string) bool {
	var l eventsv1.EventList
	if err := e.c.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		return false
	}
	for _, ev := range l.Items {
		if ev.Regarding.Kind == "PortalException" && ev.Regarding.Name == name && ev.Reason == reason {
			return true
		}
	}
	return false
}

// mustCounter finds the counter of name with these label values in reg.
func mustCounter(t *testing.T, reg *prometheus.Registry, name string, values ...string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetValue())
			}
			if slices.Equal(got, values) {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name}, func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	t.Fatalf("no %s%v in the registry", name, values)
	return nil
}
