//go:build !portal_nodev

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/devcluster"
)

// devHelloNamespace and devHelloName name the Deployment and Service
// `portal dev --node` runs once Portal is ready, so its pods go through
// Portal's admission like any workload.
const (
	devHelloNamespace = "demo"
	devHelloName      = "hello"
)

// helloWorkload is a 2-replica Deployment of the node's hello image that
// meets the restricted Pod Security Standard, and its ClusterIP Service.
func helloWorkload() (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app.kubernetes.io/name": devHelloName}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: devHelloName, Namespace: devHelloNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To[int64](65532),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            devHelloName,
						Image:           devcluster.HelloImage,
						ImagePullPolicy: corev1.PullNever,
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}}, PeriodSeconds: 2},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: devHelloName, Namespace: devHelloNamespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	return dep, svc
}

// runHello creates the hello workload, waits for both replicas and
// returns the hint that shows how to reach them.
func runHello(ctx context.Context, c client.Client) (string, error) {
	dep, svc := helloWorkload()
	for _, obj := range []client.Object{dep, svc} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &d); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return d.Status.AvailableReplicas == *dep.Spec.Replicas, nil
	})
	if err != nil {
		return "", fmt.Errorf("deployment %s/%s not available: %w", dep.Namespace, dep.Name, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		return "", err
	}
	// Available pods are not yet kube-proxy's rules: print the address once
	// it answers.
	url := "http://" + svc.Spec.ClusterIP + "/"
	httpc := &http.Client{Timeout: 2 * time.Second}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return strings.HasPrefix(string(body), "hello from "), nil
	})
	if err != nil {
		return "", fmt.Errorf("service %s/%s does not answer at %s: %w", svc.Namespace, svc.Name, url, err)
	}
	return fmt.Sprintf("\nReal pods on node %s (admitted by Portal): deployment %s/%s behind Service %s:\n  curl http://%s/   # hello from <pod name>, through kube-proxy\n",
		devcluster.NodeName, dep.Namespace, dep.Name, svc.Spec.ClusterIP, svc.Spec.ClusterIP), nil
}
