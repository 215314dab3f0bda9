package manager

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/lookup"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/testlog"
)

// cycleRule feeds its own re-evaluation: its message lists the
// resourceVersions of its namespace's PolicyReports, so every report write
// changes its finding, which rewrites the report, which changes what it
// read.
const cycleRule = `name: lookup-cycle
severity: low
mode: [audit]
match:
  gvk: [{version: v1, kind: ConfigMap}]
  namespaces: {include: [lookup-cycle]}
rule: len(cluster["policyreports.wgpolicyk8s.io"].list(object.metadata.namespace, {})) >= 0
message: 'reports at {{ join(map(cluster["policyreports.wgpolicyk8s.io"].list(object.metadata.namespace, {}), #.metadata.resourceVersion), ",") }}'
`

// burstRule fails a Deployment of lookup-burst until its namespace has five
// PodDisruptionBudgets, and says how many it saw: every PDB created
// changes its finding.
const burstRule = `name: lookup-burst
severity: low
mode: [audit]
match:
  gvk: [{group: apps, version: v1, kind: Deployment}]
  namespaces: {include: [lookup-burst]}
rule: len(cluster.poddisruptionbudgets.list(object.metadata.namespace, {})) < 5
message: 'sees {{ len(cluster.poddisruptionbudgets.list(object.metadata.namespace, {})) }} PDBs'
`

// TestCrossResourceLookups runs Portal with admission and audit against a
// real API server and the cookbook's cross-resource rules, with the audit
// resync an hour away: whatever clears or raises a finding here is an
// informer event.
func TestCrossResourceLookups(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	direct, err := client.New(cl.Config, client.Options{Scheme: mustScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := cleaningClient{Client: direct, t: t}
	dyn := dynamic.NewForConfigOrDie(cl.Config)
	for _, ns := range []string{Defaults().Namespace, "lookup-pdb", "lookup-ing-a", "lookup-ing-b", "lookup-cycle", "lookup-burst", "tenant-a", "tenant-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	dir := lookupRulesDir(t)
	peek := createPeekRule(ctx, t, c)

	cfg, reg, _ := layerConfig(t, "lookups")
	// The webhook configuration outlives the manager; a later test must
	// not meet it.
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfg.Admission.ConfigName}})
	})
	logs := &testlog.Buffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	cfg.Admission.Enabled = true
	cfg.Audit.Enabled = true
	cfg.Audit.ResyncPeriod = time.Hour
	if err := cfg.Sinks.Parse("--report-format=wgpolicyk8s"); err != nil {
		t.Fatal(err)
	}
	cfg.RulesFolder = dir
	runUntilReady(t, cl, cfg)

	t.Run("PDB clears and raises the finding", func(t *testing.T) { checkPDBFinding(ctx, t, c, dyn, reg) })

	t.Run("a PortalRule cannot read another namespace", func(t *testing.T) { checkTenantConfined(ctx, t, c, peek) })

	t.Run("a lookup of a resource not served says so", func(t *testing.T) { checkUnservedLookup(ctx, t, c, reg) })

	// The PortalRule's denial above shows the webhook configuration
	// (one object for both rules) is in place.
	t.Run("unique Ingress host at admission", func(t *testing.T) {
		if err := c.Create(ctx, ingress("lookup-ing-a", "shop", "shop.lookup.example")); err != nil {
			t.Fatal(err)
		}
		// Sent as soon as the first create returns: the consistent read
		// sees it whether or not Portal's cache has caught up.
		err := c.Create(ctx, ingress("lookup-ing-b", "copy", "shop.lookup.example"))
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "lookup-ing-a/shop") {
			t.Fatalf("second Ingress for the same host: %v, want a denial naming lookup-ing-a/shop", err)
		}
		if err := c.Create(ctx, ingress("lookup-ing-b", "other", "other.lookup.example")); err != nil {
			t.Fatalf("an Ingress with its own host: %v", err)
		}
		// Updating the first Ingress is not a conflict with itself.
		var ing networkingv1.Ingress
		if err := c.Get(ctx, client.ObjectKey{Namespace: "lookup-ing-a", Name: "shop"}, &ing); err != nil {
			t.Fatal(err)
		}
		ing.Labels = map[string]string{"touched": "yes"}
		if err := c.Update(ctx, &ing); err != nil {
			t.Fatalf("updating the only Ingress of a host: %v", err)
		}
	})

	// A legitimate burst past the cycle limit: five PDBs in a row are five
	// re-evaluations of each Deployment, two more than the guard allows in
	// its window. The last ones must not wait for the resync (an hour
	// here): the guard re-evaluates the pair once more when its window
	// allows.
	t.Run("a burst of changes past the cycle limit still ends correct", func(t *testing.T) { checkBurstEndsCorrect(ctx, t, c, dyn, reg) })

	t.Run("a rule that feeds its own re-evaluation is capped", func(t *testing.T) {
		if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "loop", Namespace: "lookup-cycle"}}); err != nil {
			t.Fatal(err)
		}
		// The log line names the rule and the object; the counter moves.
		line := `"msg":"lookup re-evaluation suppressed`
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, line) && strings.Contains(l, `"rule":"file/lookup-cycle"`) && strings.Contains(l, `"object":"ConfigMap lookup-cycle/loop"`) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no log line says the cycle of lookup-cycle on ConfigMap lookup-cycle/loop was suppressed: %v", err)
		}
		if n := counter(t, reg, "portal_lookup_cycle_suppressed_total"); n == 0 {
			t.Error("portal_lookup_cycle_suppressed_total did not move")
		}
	})

}

// cleaningClient deletes every object it created, except namespaces, when
// the test ends, so that the test runs again on the same API server (go
// test -count=2): envtest has no namespace controller, so namespaces stay,
// and what is left in them would change the next run's findings.
type cleaningClient struct {
	client.Client
	t *testing.T
}

func (c cleaningClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.Client.Create(ctx, obj, opts...); err != nil {
		return err
	}
	if _, ok := obj.(*corev1.Namespace); ok {
		return nil
	}
	created := obj.DeepCopyObject().(client.Object)
	c.t.Cleanup(func() {
		err := c.Client.Delete(context.Background(), created, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if client.IgnoreNotFound(err) != nil {
			c.t.Errorf("delete %T %s: %v", created, client.ObjectKeyFromObject(created), err)
		}
	})
	return nil
}

// lookupRulesDir writes the cookbook's cross-resource rules, the cycle rule
// and the burst rule into a rules folder.
func lookupRulesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"require-pdb-per-deployment.yaml", "unique-ingress-host.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "examples", "rules", "cross-resource", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cycle.yaml"), []byte(cycleRule), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "burst.yaml"), []byte(burstRule), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// createPeekRule creates tenant-b's ConfigMap with a password and a tenant-a
// rule that tries to read it.
func createPeekRule(ctx context.Context, t *testing.T, c client.Client) *policyv1alpha1.PortalRule {
	t.Helper()
	// A tenant's rule that tries to read another tenant's ConfigMap.
	peek := &policyv1alpha1.PortalRule{ObjectMeta: metav1.ObjectMeta{Name: "peek", Namespace: "tenant-a"}, Spec: policyv1alpha1.RuleSpec{
		Mode: []policyv1alpha1.Mode{"admission"}, EnforcementAction: "deny", OnError: "deny",
		Match:   policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "ConfigMap"}}},
		Rule:    `cluster.configmaps.byName("tenant-b", "db")?.data?.password == "hunter2"`,
		Message: `tenant-b's password is {{ cluster.configmaps.byName("tenant-b", "db")?.data?.password }}`,
	}}
	if err := c.Create(ctx, peek); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "tenant-b"}, Data: map[string]string{"password": "hunter2"}}); err != nil {
		t.Fatal(err)
	}
	return peek
}

// checkPDBFinding: a Deployment without a PDB has a finding, which its PDB
// clears (through a lookup re-queue) and its deletion raises again.
func checkPDBFinding(ctx context.Context, t *testing.T, c client.Client, dyn dynamic.Interface, reg *prometheus.Registry) {
	const ns = "lookup-pdb"
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](2),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx:1.27"}}},
		},
	}}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	waitFinding(t, dyn, ns, "require-pdb-per-deployment", "web", true)
	requeues := counter(t, reg, "portal_lookup_requeues_total")
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(1)),
		Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
	}}
	if err := c.Create(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	waitFinding(t, dyn, ns, "require-pdb-per-deployment", "web", false)
	if got := counter(t, reg, "portal_lookup_requeues_total"); got <= requeues {
		t.Errorf("portal_lookup_requeues_total %v -> %v: the PDB's event did not re-queue the Deployment", requeues, got)
	}
	if err := c.Delete(ctx, pdb); err != nil {
		t.Fatal(err)
	}
	waitFinding(t, dyn, ns, "require-pdb-per-deployment", "web", true)
}

// checkBurstEndsCorrect: PDBs created past the cycle limit still reach
// both Deployments' findings, through the guard's trailing re-evaluation.
func checkBurstEndsCorrect(ctx context.Context, t *testing.T, c client.Client, dyn dynamic.Interface, reg *prometheus.Registry) {
	const ns = "lookup-burst"
	deps := []string{"web", "api"}
	for _, name := range deps {
		if err := c.Create(ctx, deployment(ns, name)); err != nil {
			t.Fatal(err)
		}
		waitFindingMessage(t, dyn, ns, "lookup-burst", name, "sees 0 PDBs")
	}
	suppressed := counter(t, reg, "portal_lookup_cycle_suppressed_total")
	pdb := func(i int) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("pdb-", i), Namespace: ns}, Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint("part-", i)}},
		}}
	}
	// The limit's worth first, seen through before the rest, so the
	// last two changes are past the limit whatever the workers' pace.
	for i := range lookup.DefaultCycleLimit {
		if err := c.Create(ctx, pdb(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range deps {
		waitFindingMessage(t, dyn, ns, "lookup-burst", name, fmt.Sprintf("sees %d PDBs", lookup.DefaultCycleLimit))
	}
	for i := lookup.DefaultCycleLimit; i < 5; i++ {
		if err := c.Create(ctx, pdb(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range deps {
		waitFinding(t, dyn, ns, "lookup-burst", name, false)
	}
	if got := counter(t, reg, "portal_lookup_cycle_suppressed_total"); got <= suppressed {
		t.Errorf("portal_lookup_cycle_suppressed_total %v -> %v: the burst did not reach the cycle limit, so this test proves nothing", suppressed, got)
	}
}

// checkTenantConfined: tenant-a's rule reading tenant-b's ConfigMap denies
// without revealing it, and its status says what it reads.
func checkTenantConfined(ctx context.Context, t *testing.T, c client.Client, peek *policyv1alpha1.PortalRule) {
	// Until the webhook configuration reaches the API server, creates
	// are admitted without Portal: retry those until Portal answers.
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "tenant-a"}}
		if err = c.Create(ctx, probe); err == nil {
			_ = c.Delete(ctx, probe)
			return false, nil
		}
		return true, nil
	})
	if err == nil || !strings.Contains(err.Error(), "confined to its own namespace") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("create in tenant-a: %v, want a denial saying the rule's lookups are confined, without tenant-b's data", err)
	}
	var pr policyv1alpha1.PortalRule
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(peek), &pr); err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(pr.Status.Conditions, policyv1alpha1.ConditionLookupsReady)
		return cond != nil && len(pr.Status.Reads) == 1, nil
	})
	if err != nil {
		t.Fatalf("PortalRule status: reads %v, conditions %v: %v", pr.Status.Reads, pr.Status.Conditions, err)
	}
	if pr.Status.Reads[0] != "/configmaps" {
		t.Errorf("status.reads = %v, want [/configmaps]", pr.Status.Reads)
	}
}

// TestConsistentReadSeesWhatTheCacheHasNot evaluates the unique-ingress-host
// rule at admission with a cache that has not seen the first Ingress yet
// (its informer lags, or the two creates race it): the consistent read asks
// the API server and refuses the second; the same rule reading the cache
// would let it through.
func TestConsistentReadSeesWhatTheCacheHasNot(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	c, err := client.New(cl.Config, client.Options{Scheme: mustScheme(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"consistent-a", "consistent-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, ingress("consistent-a", "first", "race.lookup.example")); err != nil {
		t.Fatal(err)
	}
	mapper := c.RESTMapper()
	stale := lookup.FromReader{R: (&clustercache.StaticBuilder{}).Build()}
	dyn := dynamic.NewForConfigOrDie(cl.Config)
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "rules", "cross-resource", "unique-ingress-host.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "unique.yaml")
	for name, src := range map[string]string{"consistent": string(data), "cached": strings.ReplaceAll(string(data), "cluster.consistent.", "cluster.")} {
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		l := lookup.New(lookup.Options{Cache: stale, API: lookup.DynamicAPI{Client: dyn}, Resolver: lookup.NewMapperResolver(mapper)})
		eng := engine.New(exprlang.New(), engine.WithBinder(l))
		rules, errs := rule.LoadPaths(eng, []string{path})
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		eng.SetRules(rules)
		second := ingress("consistent-b", "second", "race.lookup.example")
		u, err := toUnstructured(c, second)
		if err != nil {
			t.Fatal(err)
		}
		res, err := eng.Evaluate(ctx, u, engine.Options{Mode: core.ModeAdmission, Request: &core.Request{Operation: "CREATE"}})
		if err != nil || len(res) != 1 {
			t.Fatalf("%s: %v %v", name, res, err)
		}
		want := core.OutcomeFail
		if name == "cached" {
			want = core.OutcomePass
		}
		if res[0].Outcome != want {
			t.Errorf("%s read: %s (%s), want %s", name, res[0].Outcome, res[0].Message, want)
		}
	}
}

func mustScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](2),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "nginx:1.27"}}},
		},
	}}
}

func ingress(ns, name, host string) *networkingv1.Ingress {
	prefix := networkingv1.PathTypePrefix
	return &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: networkingv1.IngressSpec{
		Rules: []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}},
			}}},
		}}}},
	}}
}

func toUnstructured(c client.Client, obj client.Object) (*unstructured.Unstructured, error) {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

var policyReportGVR = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}

// waitFinding polls the namespace's PolicyReports until the rule's failing
// result on the named object is there (want) or gone.
func waitFinding(t *testing.T, dyn dynamic.Interface, ns, ruleName, object string, want bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := dyn.Resource(policyReportGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		found := false
		for _, r := range l.Items {
			results, _, _ := unstructured.NestedSlice(r.Object, "results")
			for _, x := range results {
				m, _ := x.(map[string]any)
				res, _ := m["resources"].([]any)
				if m["policy"] != ruleName || m["result"] != "fail" || len(res) == 0 {
					continue
				}
				if ref, _ := res[0].(map[string]any); ref["name"] == object {
					found = true
				}
			}
		}
		return found == want, nil
	})
	if err != nil {
		t.Fatalf("%s on %s/%s: finding present=%v never observed: %v", ruleName, ns, object, want, err)
	}
}

// waitFindingMessage polls the namespace's PolicyReports until the rule's
// failing result on the named object says msg.
func waitFindingMessage(t *testing.T, dyn dynamic.Interface, ns, ruleName, object, msg string) {
	t.Helper()
	var last []string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := dyn.Resource(policyReportGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		last = last[:0]
		for _, r := range l.Items {
			results, _, _ := unstructured.NestedSlice(r.Object, "results")
			for _, x := range results {
				m, _ := x.(map[string]any)
				res, _ := m["resources"].([]any)
				if m["policy"] != ruleName || m["result"] != "fail" || len(res) == 0 {
					continue
				}
				if ref, _ := res[0].(map[string]any); ref["name"] == object {
					got, _ := m["message"].(string)
					last = append(last, got)
					if got == msg {
						return true, nil
					}
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s on %s/%s: finding %q never observed (last %q): %v", ruleName, ns, object, msg, last, err)
	}
}

// counter reads a counter (or gauge) from reg; 0 when absent.
func counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += metricValue(m)
		}
	}
	return sum
}

func metricValue(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
