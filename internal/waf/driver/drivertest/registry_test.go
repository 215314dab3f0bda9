package drivertest_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/driver"
	"github.com/vilaca/portal/internal/waf/driver/drivertest"
	"github.com/vilaca/portal/internal/waf/engine"
	"github.com/vilaca/portal/internal/waf/ruleset"
	"github.com/vilaca/portal/test/waftest"
)

// The test-only driver: this file's init and type are all it takes, as
// docs/contributing/adding-a-driver.md promises. Its data plane is one
// ConfigMap; it cannot run rule 1001.
const testDriver wafv1alpha1.DriverType = "test-driver"

const (
	testRuleID   = 1001
	testRuntime  = "the test build of Coraza"
	testMessage  = "the test data plane holds the RuleSet"
	testDataPlan = "-test-plane"
)

func init() { driver.Register(testOnly{}) }

type testOnly struct{}

func (testOnly) Name() wafv1alpha1.DriverType { return testDriver }

func (testOnly) Limits() ruleset.Limits {
	return ruleset.Limits{Runtime: testRuntime, Rules: map[int]string{testRuleID: "the test data plane cannot run it"}}
}

func (testOnly) Owned(_ driver.Settings, eng *wafv1alpha1.Engine) []driver.Object {
	return []driver.Object{{GVK: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Namespace: eng.Namespace, Name: engine.ChildName(eng.Name) + testDataPlan}}
}

func (testOnly) Provision(ctx context.Context, h driver.Host, eng *wafv1alpha1.Engine) (driver.Result, error) {
	if err := h.AllowCache(ctx, eng, map[string]string{"app.kubernetes.io/name": "test-plane"}); err != nil {
		return driver.Result{}, err
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: eng.Namespace, Name: engine.ChildName(eng.Name) + testDataPlan},
		Data:       map[string]string{"ruleset": eng.Spec.RuleSet.Name},
	}
	if err := h.Apply(ctx, cm); err != nil {
		return driver.Result{}, err
	}
	return driver.Result{Message: testMessage}, nil
}

// TestRegisteredDriverAppearsInDriftChecks: the drift checks compare the
// CRD's enum and the chart's RBAC with the registry, so a driver registered
// and nowhere else is what they report.
func TestRegisteredDriverAppearsInDriftChecks(t *testing.T) {
	enum, err := drivertest.EngineCRDEnum()
	if err != nil {
		t.Fatal(err)
	}
	drift := driver.EnumDrift(enum)
	if len(drift) != 1 || !strings.Contains(drift[0], string(testDriver)) {
		t.Errorf("enum drift %q, want the test driver alone", drift)
	}
	eng := &wafv1alpha1.Engine{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "edge"}}
	grants := driver.Grants(driver.Settings{OperatorName: "portal"}, eng)
	for _, verb := range []string{"patch", "delete"} {
		want := driver.Grant{Driver: testDriver, Verb: verb, Group: "", Resource: "configmaps", Namespace: "team"}
		if !slices.Contains(grants, want) {
			t.Errorf("grants %+v lack %+v", grants, want)
		}
	}
}

// TestSwitchToRegisteredDriver: with nothing but the registration above,
// an Engine moved from waf-proxy to the test driver is refused while its
// RuleSet holds the rule the test driver's limits name (the RuleSet
// controller found it), and once the RuleSet acknowledges it, the test
// driver's data plane is up and every waf-proxy object is gone: the
// teardown comes from the registry, not from a list naming the drivers.
func TestSwitchToRegisteredDriver(t *testing.T) {
	c := cluster(t)
	ctx := t.Context()
	const ns = "switch-registered"
	create(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	rs := ruleSet(t, c, ns, "guard")
	gw := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"gatewayClassName": "istio",
		"listeners":        []any{map[string]any{"name": "http", "port": int64(80), "protocol": "HTTP"}},
	}}}
	gw.SetGroupVersionKind(engine.GatewayGVK)
	gw.SetNamespace(ns)
	gw.SetName("edge")
	create(t, c, gw, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-istio", Labels: map[string]string{wafv1alpha1.GatewayNameLabel: "edge"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	if !slices.ContainsFunc(rs.Status.UnsupportedRules, func(u wafv1alpha1.UnsupportedRule) bool {
		return u.Driver == string(testDriver) && u.RuleID == testRuleID
	}) {
		t.Errorf("RuleSet status.unsupportedRules %+v lack the test driver's rule %d", rs.Status.UnsupportedRules, testRuleID)
	}

	eng := &wafv1alpha1.Engine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge-waf"},
		Spec: wafv1alpha1.EngineSpec{
			RuleSet: wafv1alpha1.EngineRuleSetReference{Name: rs.Name},
			Target:  wafv1alpha1.EngineTarget{Name: "edge"},
			Driver:  wafv1alpha1.DriverConfig{Type: wafv1alpha1.DriverWAFProxy},
		},
	}
	create(t, c, eng)
	waitFor(t, c, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	name := engine.ChildName(eng.Name)
	proxyObjects := []driver.Object{
		{GVK: appsv1.SchemeGroupVersion.WithKind("Deployment"), Namespace: ns, Name: name},
		{GVK: corev1.SchemeGroupVersion.WithKind("Service"), Namespace: ns, Name: name},
		{GVK: policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), Namespace: ns, Name: name},
		{GVK: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Namespace: ns, Name: engine.CAConfigMapName(eng.Name)},
	}
	for _, o := range proxyObjects {
		if !exists(t, c, o) {
			t.Fatalf("no waf-proxy %s %s", o.GVK.Kind, o.Name)
		}
	}

	offerRegisteredDrivers(t, c)
	devtest.Eventually(t, "the Engine moved to the test driver", func() bool {
		if err := c.Get(ctx, client.ObjectKeyFromObject(eng), eng); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(eng.DeepCopy())
		eng.Spec.Driver.Type = testDriver
		return c.Patch(ctx, eng, patch) == nil // Invalid until the API server serves the new enum
	})
	waitFor(t, c, eng, wafv1alpha1.ConditionDegraded, metav1.ConditionTrue, wafv1alpha1.ReasonUnsupportedRules)
	if m := readCondition(t, c, eng, wafv1alpha1.ConditionDegraded).Message; !strings.Contains(m, fmt.Sprint(testRuleID)) || !strings.Contains(m, testRuntime) {
		t.Errorf("Degraded message %q names neither rule %d nor %s", m, testRuleID, testRuntime)
	}

	patch := client.MergeFrom(rs.DeepCopy())
	rs.Annotations = map[string]string{wafv1alpha1.AnnotationAllowUnsupportedRules: "true"}
	if err := c.Patch(ctx, rs, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, c, eng, wafv1alpha1.ConditionReady, metav1.ConditionTrue, wafv1alpha1.ReasonProvisioned)
	if m := readCondition(t, c, eng, wafv1alpha1.ConditionReady).Message; m != testMessage {
		t.Errorf("Ready message %q, want the test driver's", m)
	}
	if !exists(t, c, testOnly{}.Owned(driver.Settings{}, eng)[0]) {
		t.Error("no test data plane")
	}
	for _, o := range proxyObjects {
		if exists(t, c, o) {
			t.Errorf("waf-proxy %s %s remains after the switch to the test driver", o.GVK.Kind, o.Name)
		}
	}
}

// offerRegisteredDrivers sets the served Engine CRD's enum to the registry,
// what `make generate` does once a driver's marker is added.
func offerRegisteredDrivers(t *testing.T, c client.Client) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	crd.SetName("engines.waf.portal.io")
	var enum []any
	for _, n := range driver.Names() {
		enum = append(enum, string(n))
	}
	// The API server writes the CRD's conditions: Update retries on conflict.
	devtest.Update(t, c, crd, func() {
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		for i := range versions {
			v := versions[i].(map[string]any)
			path := []string{"schema", "openAPIV3Schema", "properties", "spec", "properties", "driver", "properties", "type", "enum"}
			if err := unstructured.SetNestedSlice(v, enum, path...); err != nil {
				t.Fatal(err)
			}
		}
		if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
			t.Fatal(err)
		}
	})
}

// One control plane with the Gateway API CRDs and the WAF layer.
var (
	env    *waftest.Env
	shared = devtest.Shared{Setup: func(cl *devcluster.Cluster) (func() error, error) {
		e, stop, err := waftest.StartWith(cl, slog.New(slog.NewTextHandler(io.Discard, nil)), func(o *waf.Options) {
			o.Engine.WASMImage = "oci://example.test/coraza-wasm:test"
			o.Engine.ProxyImage = "example.test/portal:test"
		})
		env = e
		return stop, err
	}}
	crdsOnce sync.Once
)

func TestMain(m *testing.M) { shared.Main(m) }

func cluster(t *testing.T) client.Client {
	t.Helper()
	var err error
	crdsOnce.Do(func() {
		var root string
		var paths []string
		if root, err = devcluster.RepoRoot(); err != nil {
			return
		}
		if paths, err = devcluster.ThirdPartyCRDPaths(devcluster.GatewayAPIExperimental); err != nil {
			return
		}
		shared.Options.CRDDirectoryPaths = append([]string{filepath.Join(root, "deploy", "crds")}, paths...)
	})
	if err != nil {
		t.Fatal(err)
	}
	shared.Cluster(t)
	return env.Client
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

// ruleSet creates a RuleSet of one rule, id testRuleID, and waits until it
// has a cached revision.
func ruleSet(t *testing.T, c client.Client, ns, name string) *wafv1alpha1.RuleSet {
	t.Helper()
	rules := fmt.Sprintf("SecRuleEngine On\nSecRule ARGS:attack \"@streq 1\" \"id:%d,phase:1,deny,status:403\"\n", testRuleID)
	rs := &wafv1alpha1.RuleSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       wafv1alpha1.RuleSetSpec{Sources: []wafv1alpha1.SourceReference{{Name: name}}},
	}
	create(t, c, &wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: wafv1alpha1.RuleSourceSpec{Rules: rules}}, rs)
	devtest.Eventually(t, "RuleSet "+name+" cached", func() bool {
		return c.Get(t.Context(), client.ObjectKeyFromObject(rs), rs) == nil && rs.Status.CachedRevision != nil
	})
	return rs
}

func readCondition(t *testing.T, c client.Client, eng *wafv1alpha1.Engine, typ string) metav1.Condition {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(eng), eng); err != nil {
		t.Fatal(err)
	}
	if got := meta.FindStatusCondition(eng.Status.Conditions, typ); got != nil {
		return *got
	}
	return metav1.Condition{}
}

// waitFor waits until the Engine's condition has this status and reason
// for its current generation.
func waitFor(t *testing.T, c client.Client, eng *wafv1alpha1.Engine, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	devtest.Eventually(t, fmt.Sprintf("Engine %s %s=%s/%s", eng.Name, typ, status, reason), func() bool {
		got := readCondition(t, c, eng, typ)
		return got.Status == status && got.Reason == reason && got.ObservedGeneration == eng.Generation
	})
}

func exists(t *testing.T, c client.Client, o driver.Object) bool {
	t.Helper()
	u := &metav1.PartialObjectMetadata{}
	u.SetGroupVersionKind(o.GVK)
	err := c.Get(t.Context(), client.ObjectKey{Namespace: o.Namespace, Name: o.Name}, u)
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	// Deleted in the background: gone for the test once it is going.
	return u.DeletionTimestamp.IsZero()
}
