package apigateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/manager"
)

var (
	shared = devtest.Shared{Setup: start}
	k8s    client.Client
)

func TestMain(m *testing.M) {
	root, err := devcluster.RepoRoot()
	if err == nil {
		var more []string
		if more, err = devcluster.ThirdPartyCRDPaths(devcluster.GatewayAPIExperimental, devcluster.Istio); err == nil {
			shared.Options.CRDDirectoryPaths = append([]string{filepath.Join(root, "deploy", "crds")}, more...)
		}
	}
	if err != nil {
		panic(err)
	}
	shared.Main(m)
}

func start(cl *devcluster.Cluster) (func() error, error) {
	ctrl.SetLogger(logr.Discard())
	scheme, err := manager.Scheme()
	if err != nil {
		return nil, err
	}
	mgr, err := devtest.NewManager(cl, scheme)
	if err != nil {
		return nil, err
	}
	o := apigateway.DefaultOptions()
	o.Logger = slog.New(slog.DiscardHandler)
	// The internal JWKS host TestAPIRuleInternalJWKSRefused lets through.
	o.JWKSAllowInternal = []string{allowedJWKSHost}
	if err := apigateway.Setup(mgr, o); err != nil {
		return nil, err
	}
	k8s, err = client.New(cl.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return devtest.Run(mgr), nil
}

func setup(t *testing.T) context.Context {
	t.Helper()
	shared.Cluster(t)
	return t.Context()
}

// namespace creates a namespace with sidecar injection on, as Istio users
// label theirs.
func namespace(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"istio-injection": "enabled"}}}
	if err := k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// workload creates a Service app on port and one pod behind it, with an
// Istio sidecar when sidecar is set.
func workload(t *testing.T, ctx context.Context, ns, app string, port uint32, sidecar bool, extra map[string]string) []client.Object {
	t.Helper()
	labels := map[string]string{"app": app}
	for k, v := range extra {
		labels[k] = v
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: int32(port), TargetPort: intstr.FromInt32(int32(port))}},
		},
	}
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: app + "-0", Namespace: ns, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: app, Image: "example.com/" + app + ":1"}}},
	}
	if sidecar {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "istio-proxy", Image: "example.com/proxyv2:1"})
	}
	for _, o := range []client.Object{svc, pod} {
		if err := k8s.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	return []client.Object{svc, pod}
}

// istioGateway creates an Istio Gateway serving hosts.
func istioGateway(t *testing.T, ctx context.Context, ns, name string, hosts ...string) *networkingv1.Gateway {
	t.Helper()
	namespace(t, ctx, ns)
	gw := &networkingv1.Gateway{
		TypeMeta:   metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "Gateway"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
	}
	gw.Spec.Selector = map[string]string{"istio": "ingressgateway"}
	gw.Spec.Servers = []*networkingapi.Server{{Port: &networkingapi.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: hosts}}
	if err := k8s.Create(ctx, gw); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return gw
}

// stateOf polls obj until its Ready condition describes its generation and
// the state is want; it fails with the last status otherwise.
func waitState(t *testing.T, ctx context.Context, obj client.Object, want gatewayv1alpha1.State) *gatewayv1alpha1.Status {
	t.Helper()
	return waitStateWithin(t, ctx, obj, want, pollTimeout)
}

// waitStateWithin is waitState with a deadline of its own.
func waitStateWithin(t *testing.T, ctx context.Context, obj client.Object, want gatewayv1alpha1.State, within time.Duration) *gatewayv1alpha1.Status {
	t.Helper()
	var st *gatewayv1alpha1.Status
	var last string
	start := time.Now()
	err := pollWithin(ctx, within, func() bool {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			last = err.Error()
			return false
		}
		st = statusOf(obj)
		c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionReady)
		last = fmt.Sprintf("state %q: %s", st.State, st.Description)
		return c != nil && c.ObservedGeneration == obj.GetGeneration() && st.State == want
	})
	if err != nil {
		t.Fatalf("%T %s/%s did not reach state %s within %s: %s", obj, obj.GetNamespace(), obj.GetName(), want, within, last)
	}
	// The reaction times docs/performance.md quotes (go test -v).
	t.Logf("%T %s/%s in state %s after %s", obj, obj.GetNamespace(), obj.GetName(), want, time.Since(start).Round(time.Millisecond))
	return st
}

func statusOf(obj client.Object) *gatewayv1alpha1.Status {
	switch o := obj.(type) {
	case *gatewayv1alpha1.APIRule:
		return &o.Status
	case *gatewayv1alpha1.RateLimit:
		return &o.Status
	case *gatewayv1alpha1.APIGateway:
		return &o.Status.Status
	}
	panic(fmt.Sprintf("no status in %T", obj))
}

func reasonOf(st *gatewayv1alpha1.Status) string {
	if c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}

// pollTimeout bounds the waits for a controller's verdict.
const pollTimeout = 30 * time.Second

func pollWithin(ctx context.Context, within time.Duration, cond func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, within, true,
		func(context.Context) (bool, error) { return cond(), nil })
}

// gone waits until obj no longer exists.
func gone(t *testing.T, ctx context.Context, obj client.Object) {
	t.Helper()
	devtest.Eventually(t, fmt.Sprintf("%T %s to go", obj, obj.GetName()), func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj))
	})
}

// dnsName makes a file name into a namespace name.
func dnsName(s string) string {
	return strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(s))
}

func metaType(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func objMeta(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
}

// servicesOf maps the Services an APIRule forwards to to their ports.
func servicesOf(api *gatewayv1alpha1.APIRule) map[string]uint32 {
	out := map[string]uint32{}
	if s := api.Spec.Service; s != nil {
		out[s.Name] = s.Port
	}
	for _, r := range api.Spec.Rules {
		if r.Service != nil {
			out[r.Service.Name] = r.Service.Port
		}
	}
	return out
}
