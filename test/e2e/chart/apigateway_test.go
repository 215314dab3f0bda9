package chart

import (
	"context"
	"fmt"
	"testing"
	"time"

	networkingapi "istio.io/api/networking/v1alpha3"
	networkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	securityv1 "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway/apirule"
	"github.com/vilaca/portal/internal/devcluster"
)

// quarantineKey is the label the response action of
// TestChartAPIGatewayAndActions puts on a violating pod.
const quarantineKey = "portal.io/quarantine"

// TestChartAPIGatewayAndActions installs the chart in split mode with the
// two layers no other chart test runs: the API exposure layer in its own
// Deployment, and the response actions, which run in the audit
// Deployment. Each must do its job with only the RBAC the chart computes:
// an APIRule becomes Istio objects, and an audit finding labels its pod
// until it clears.
func TestChartAPIGatewayAndActions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ns := e.workload
	// The API exposure layer needs Istio's kinds served when it starts.
	paths, err := devcluster.ThirdPartyCRDPaths(devcluster.Istio)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(e.cl.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	pod := e.meshWorkload(t, ns, "web", 8000)

	e.installSplit(t, []string{"admission", "audit", "apigateway"}, 1, "actions.label.enabled=true")

	t.Run("APIRuleBecomesIstioObjects", func(t *testing.T) { e.apiRuleBecomesIstioObjects(t, ns) })

	t.Run("LabelActionFollowsTheFinding", func(t *testing.T) {
		r := &policyv1alpha1.PortalClusterRule{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-actions-label"},
			Spec: policyv1alpha1.RuleSpec{
				Severity: "high",
				Mode:     []policyv1alpha1.Mode{"audit"},
				Match:    policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Group: "", Kind: "Pod"}}},
				Rule:     `metadata.labels["e2e-actions"] == "true"`,
				Message:  "e2e-actions-label violated",
				Actions:  []policyv1alpha1.Action{{Type: "label", Key: quarantineKey, Value: "true"}},
			},
		}
		if err := e.c.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.c.Delete(context.Background(), r) })
		e.waitPodLabel(t, pod, "true")
		// The finding clears: the action takes its label back.
		patch := []byte(`{"metadata":{"labels":{"e2e-actions":"false"}}}`)
		if err := e.c.Patch(ctx, pod, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			t.Fatal(err)
		}
		e.waitPodLabel(t, pod, "")
	})

	t.Run("NoForbiddenErrors", func(t *testing.T) { e.assertNoForbidden(t) })

	t.Run("UninstallLeavesNothing", func(t *testing.T) {
		e.helm(t, "uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
		e.assertNothingLeft(t)
	})
}

// apiRuleBecomesIstioObjects creates an Istio Gateway and an open APIRule
// for the Service web of ns through it, and checks that the APIRule gets
// Ready with its VirtualService and AuthorizationPolicy.
func (e *env) apiRuleBecomesIstioObjects(t *testing.T, ns string) {
	ctx := context.Background()
	gw := &networkingv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "e2e-gateway", Namespace: ns}}
	gw.Spec.Selector = map[string]string{"istio": "ingressgateway"}
	gw.Spec.Servers = []*networkingapi.Server{{Port: &networkingapi.Port{Number: 80, Name: "http", Protocol: "HTTP"}, Hosts: []string{"*.e2e.example.com"}}}
	api := &gatewayv1alpha1.APIRule{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}
	api.Spec.Hosts = []gatewayv1alpha1.Host{"web.e2e.example.com"}
	api.Spec.Gateway = ns + "/" + gw.Name
	api.Spec.Service = &gatewayv1alpha1.Service{Name: "web", Port: 8000}
	api.Spec.Rules = []gatewayv1alpha1.Rule{{Path: "/{**}", NoAuth: ptr.To(true)}}
	for _, o := range []client.Object{gw, api} {
		if err := e.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	var last string
	eventually(t, 2*time.Minute, "APIRule web Ready", func(ctx context.Context) (bool, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(api), api); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(api.Status.Conditions, gatewayv1alpha1.ConditionReady)
		last = fmt.Sprintf("state %q: %s", api.Status.State, api.Status.Description)
		return c != nil && c.ObservedGeneration == api.Generation && api.Status.State == gatewayv1alpha1.StateReady, nil
	})
	t.Logf("APIRule web: %s", last)
	owned := client.MatchingLabels{apirule.LabelAPIRule: api.Name}
	var vs networkingv1.VirtualServiceList
	var ap securityv1.AuthorizationPolicyList
	for _, l := range []client.ObjectList{&vs, &ap} {
		if err := e.c.List(ctx, l, client.InNamespace(ns), owned); err != nil {
			t.Fatal(err)
		}
	}
	if len(vs.Items) != 1 || len(ap.Items) == 0 {
		t.Fatalf("%d VirtualServices and %d AuthorizationPolicies for the Ready APIRule, want 1 and at least 1", len(vs.Items), len(ap.Items))
	}
	if hosts := vs.Items[0].Spec.Hosts; len(hosts) != 1 || hosts[0] != "web.e2e.example.com" {
		t.Errorf("VirtualService hosts %v, want [web.e2e.example.com]", hosts)
	}
}

// meshWorkload creates a Service app on port and one pod behind it with an
// Istio sidecar container, labelled e2e-actions=true. The pod is held
// back from scheduling: the layers read its spec and labels, and nothing
// on the node needs to run it.
func (e *env) meshWorkload(t testing.TB, ns, app string, port int32) *corev1.Pod {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(port)}},
		},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: app + "-0", Namespace: ns, Labels: map[string]string{"app": app, "e2e-actions": "true"}},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "portal.io/e2e-hold"}},
			Containers: []corev1.Container{
				{Name: app, Image: devcluster.HelloImage, ImagePullPolicy: corev1.PullNever},
				{Name: "istio-proxy", Image: devcluster.HelloImage, ImagePullPolicy: corev1.PullNever},
			},
		},
	}
	for _, o := range []client.Object{svc, pod} {
		if err := e.c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	return pod
}

// waitPodLabel waits until pod's quarantine label is want ("" for none).
func (e *env) waitPodLabel(t testing.TB, pod *corev1.Pod, want string) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("pod %s with %s=%q", pod.Name, quarantineKey, want), func(ctx context.Context) (bool, error) {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err
		}
		return pod.Labels[quarantineKey] == want, nil
	})
}
