package engine_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/engine"
	"github.com/vilaca/portal/test/waftest"
)

// Settings of the layer under test.
const (
	wasmImage    = "oci://example.test/coraza-wasm:test"
	proxyImage   = "example.test/portal:test"
	operatorName = "portal"
	// allowedImages is the one prefix Engines may pick images under.
	allowedImages = "oci://example.test/allowed/"
	// tokenLifetime and tokenRenewBefore: Portal renews a WasmPlugin's
	// token once the clock below passes 8 minutes after it was minted.
	tokenLifetime    = 10 * time.Minute
	tokenRenewBefore = 2 * time.Minute
)

// clock is the Engine controller's: token renewal happens when a test
// moves it, not when the machine's clock gets there.
var clock = clocktesting.NewFakeClock(time.Now())

// One control plane with the Gateway API and Istio CRDs, and the WAF layer
// (Engine controller included), for the tests of this package.
var (
	env    *waftest.Env
	shared = devtest.Shared{Setup: func(cl *devcluster.Cluster) (func() error, error) {
		// What an earlier release left behind, for the start-up cleanup.
		if err := legacyFixture(cl); err != nil {
			return nil, err
		}
		e, stop, err := waftest.StartWith(cl, slog.New(slog.NewTextHandler(io.Discard, nil)), func(o *waf.Options) {
			o.Engine.WASMImage = wasmImage
			o.Engine.ProxyImage = proxyImage
			o.Engine.OperatorName = operatorName
			o.Engine.AllowedImages = []string{allowedImages}
			o.Engine.TokenExpiration = tokenLifetime
			o.Engine.TokenRenewBefore = tokenRenewBefore
			o.Engine.Clock = clock
		})
		env = e
		return stop, err
	}}
)

func TestMain(m *testing.M) { shared.Main(m) }

// crdsOnce points the control plane at Portal's CRDs and the Gateway API
// and Istio ones, on first use (fuzz workers never start it).
var crdsOnce sync.Once

func cluster(t *testing.T) client.Client {
	t.Helper()
	var err error
	crdsOnce.Do(func() {
		var root string
		var paths []string
		if root, err = devcluster.RepoRoot(); err != nil {
			return
		}
		if paths, err = devcluster.ThirdPartyCRDPaths(devcluster.GatewayAPIExperimental, devcluster.Istio); err != nil {
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

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	devtest.Eventually(t, what, cond)
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func namespace(t *testing.T, name string) string {
	t.Helper()
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

// guardRules block requests with ?attack=1.
const guardRules = "SecRuleEngine On\nSecRule ARGS:attack \"@streq 1\" \"id:1001,phase:1,deny,status:403\"\n"

// ruleSet creates a RuleSource and a RuleSet of these rules and waits until
// the RuleSet has a cached revision.
func ruleSet(t *testing.T, ns, name, rules string) *wafv1alpha1.RuleSet {
	t.Helper()
	rs := &wafv1alpha1.RuleSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       wafv1alpha1.RuleSetSpec{Sources: []wafv1alpha1.SourceReference{{Name: name}}},
	}
	create(t, &wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: wafv1alpha1.RuleSourceSpec{Rules: rules}}, rs)
	eventually(t, "RuleSet "+ns+"/"+name+" cached", func() bool {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(rs), rs)
		return err == nil && rs.Status.CachedRevision != nil
	})
	return rs
}

// gateway creates a Gateway API Gateway.
func gateway(t *testing.T, ns, name string) {
	t.Helper()
	gw := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"gatewayClassName": "istio",
			"listeners":        []any{map[string]any{"name": "http", "port": int64(80), "protocol": "HTTP"}},
		},
	}}
	gw.SetGroupVersionKind(engine.GatewayGVK)
	gw.SetNamespace(ns)
	gw.SetName(name)
	create(t, gw)
}

func newEngine(ns, name, rs, gw string, driver wafv1alpha1.DriverType) *wafv1alpha1.Engine {
	return &wafv1alpha1.Engine{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: wafv1alpha1.EngineSpec{
			RuleSet: wafv1alpha1.EngineRuleSetReference{Name: rs},
			Target:  wafv1alpha1.EngineTarget{Name: gw},
			Driver:  wafv1alpha1.DriverConfig{Type: driver},
		},
	}
}

// condition reads the Engine and returns its condition of this type.
func condition(t *testing.T, eng *wafv1alpha1.Engine, typ string) *metav1.Condition {
	t.Helper()
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(eng), eng); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(eng.Status.Conditions, typ)
}

// waitFor waits until the Engine's condition has this status and reason
// for its current generation.
func waitFor(t *testing.T, eng *wafv1alpha1.Engine, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	waitWithin(t, eng, typ, status, reason, pollTimeout)
}

// awaitedWithin bounds how long the Engine may take to notice an object
// it waits for (its Gateway, RuleSet or Gateway Service): far less than
// the resync, which is all that brought it back before it watched them,
// with a margin for a loaded test machine.
const awaitedWithin = 10 * time.Second

// waitWithin is waitFor with a deadline of its own.
func waitWithin(t *testing.T, eng *wafv1alpha1.Engine, typ string, status metav1.ConditionStatus, reason string, within time.Duration) {
	t.Helper()
	var last *metav1.Condition
	start := time.Now()
	err := pollWithin(within, func() bool {
		last = condition(t, eng, typ)
		return last != nil && last.Status == status && last.Reason == reason && last.ObservedGeneration == eng.Generation
	})
	if err != nil {
		t.Fatalf("Engine %s/%s: waiting %s for %s=%s/%s; last %+v", eng.Namespace, eng.Name, within, typ, status, reason, last)
	}
	// The reaction times docs/performance.md quotes (go test -v).
	t.Logf("Engine %s/%s: %s=%s/%s after %s", eng.Namespace, eng.Name, typ, status, reason, time.Since(start).Round(time.Millisecond))
}

// pollTimeout bounds the waits for the controller's verdict.
const pollTimeout = 30 * time.Second

func pollWithin(within time.Duration, cond func() bool) error {
	return wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, within, true,
		func(context.Context) (bool, error) { return cond(), nil })
}

// object reads an object of this kind, or reports it absent.
func object(t *testing.T, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, bool) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return u, true
}

func wasmPlugin(t *testing.T, eng *wafv1alpha1.Engine) (*unstructured.Unstructured, bool) {
	t.Helper()
	return object(t, engine.WasmPluginGVK, eng.Namespace, engine.ChildName(eng.Name))
}

// deleteEngine deletes the Engine and waits until it is gone (Portal has
// removed its finalizer).
func deleteEngine(t *testing.T, eng *wafv1alpha1.Engine) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), eng); err != nil {
		t.Fatal(err)
	}
	eventually(t, "Engine "+eng.Name+" gone", func() bool {
		return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKeyFromObject(eng), &wafv1alpha1.Engine{}))
	})
}
