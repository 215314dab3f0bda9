package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// uninstallFixture is a namespace with a Portal Deployment, one of its pods
// (no controllers run in the test control plane, so the test plays the
// ReplicaSet controller and deletes it) and a webhook configuration.
func uninstallFixture(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	cl, err := devcluster.Start(context.Background(), devcluster.Options{CRDDirectoryPaths: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Stop(); err != nil {
			t.Error(err)
		}
	})
	cs := kubernetes.NewForConfigOrDie(cl.Config)
	ctx := t.Context()
	const ns = "portal-system"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "portal"}
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "portal", Image: "portal"}}}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "portal", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "portal-1", Namespace: ns, Labels: labels}, Spec: podSpec}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createWebhookConfig(t, cs)
	// What Portal writes at run time: its certificate Secret and Lease.
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "portal-webhook-cert", Namespace: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "portal", Namespace: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cs, ns
}

// portalWrittenLeft lists which of the Secret and Lease Portal wrote are
// still there.
func portalWrittenLeft(t *testing.T, cs kubernetes.Interface, ns string) []string {
	t.Helper()
	var left []string
	if _, err := cs.CoreV1().Secrets(ns).Get(t.Context(), "portal-webhook-cert", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		left = append(left, "Secret portal-webhook-cert")
	}
	if _, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), "portal", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		left = append(left, "Lease portal")
	}
	return left
}

// createWebhookConfig writes the configuration as Portal's leader does: a
// fail-closed webhook pointing at a Service.
func createWebhookConfig(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "portal-test"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate.portal.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "portal-system", Name: "portal-webhook"}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(t.Context(), cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func webhookConfigGone(t *testing.T, cs kubernetes.Interface) bool {
	t.Helper()
	_, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), "portal-test", metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

// A leader that writes the configuration back while Portal stops must not
// leave it behind: uninstall deletes it first, and again once the pods are
// gone.
func TestUninstallRemovesWebhookConfigFirstAndAfterPortalStops(t *testing.T) {
	cs, ns := uninstallFixture(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	o := uninstallOptions{Namespace: ns, ConfigNames: []string{"portal-test"}, Deployments: []string{"portal", "absent"}, Timeout: time.Minute, Poll: 20 * time.Millisecond,
		Secrets: []string{"portal-webhook-cert", "absent"}, Leases: []string{"portal"}}
	done := make(chan error, 1)
	go func() { done <- uninstall(t.Context(), cs, o, log) }()

	devtest.Eventually(t, "the configuration deleted and Portal scaled to zero", func() bool {
		d, err := cs.AppsV1().Deployments(ns).Get(t.Context(), "portal", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return webhookConfigGone(t, cs) && *d.Spec.Replicas == 0
	})
	select {
	case err := <-done:
		t.Fatalf("uninstall returned while a Portal pod runs: %v", err)
	default:
	}
	if left := portalWrittenLeft(t, cs, ns); len(left) != 2 {
		t.Fatalf("only %v left while a Portal pod runs: a running leader would write them again", left)
	}
	// The stopping leader writes the configuration once more.
	createWebhookConfig(t, cs)
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "portal-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !webhookConfigGone(t, cs) {
		t.Error("the webhook configuration written back while Portal stopped is still there")
	}
	if left := portalWrittenLeft(t, cs, ns); len(left) > 0 {
		t.Errorf("left after uninstall: %v", left)
	}
}

func TestUninstallTimeoutStillDeletesTheConfig(t *testing.T) {
	cs, ns := uninstallFixture(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	o := uninstallOptions{Namespace: ns, ConfigNames: []string{"portal-test"}, Deployments: []string{"portal"}, Timeout: 200 * time.Millisecond, Poll: 20 * time.Millisecond}
	err := uninstall(t.Context(), cs, o, log)
	if err == nil || !strings.Contains(err.Error(), "did not stop within --timeout") {
		t.Fatalf("uninstall with a pod that never stops: got %v, want the timeout error", err)
	}
	if !webhookConfigGone(t, cs) {
		t.Error("the webhook configuration is still there after the timeout")
	}
}
