//go:build !portal_nodev

package main

import (
	"context"
	"fmt"
	"io"
	"maps"
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
	return nodeWorkload(devHelloNamespace, devHelloName, 2, nil)
}

// nodeWorkload is a Deployment of the node's hello image in namespace ns
// that meets the restricted Pod Security Standard, and a ClusterIP Service
// of it on port 80 carrying svcLabels besides the pods' own.
func nodeWorkload(ns, name string, replicas int32, svcLabels map[string]string) (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app.kubernetes.io/name": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
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
						Name:            name,
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
	all := maps.Clone(labels)
	maps.Copy(all, svcLabels)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: all},
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
	if err := createAvailable(ctx, c, dep, svc); err != nil {
		return "", err
	}
	// Available pods are not yet kube-proxy's rules: print the address once
	// it answers.
	url := "http://" + svc.Spec.ClusterIP + "/"
	if err := waitHTTP(ctx, url, "", http.StatusOK, "hello from "); err != nil {
		return "", fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return fmt.Sprintf("\nReal pods on node %s (admitted by Portal): deployment %s/%s behind Service %s:\n  curl http://%s/   # hello from <pod name>, through kube-proxy\n",
		devcluster.NodeName, dep.Namespace, dep.Name, svc.Spec.ClusterIP, svc.Spec.ClusterIP), nil
}

// createAvailable creates dep and the other objects (keeping those that
// exist), waits until every replica of dep is available and reads svc back,
// so its ClusterIP is set.
func createAvailable(ctx context.Context, c client.Client, dep *appsv1.Deployment, svc *corev1.Service, more ...client.Object) error {
	for _, obj := range append([]client.Object{dep, svc}, more...) {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
		}
	}
	if err := waitAvailable(ctx, c, client.ObjectKeyFromObject(dep), *dep.Spec.Replicas); err != nil {
		return err
	}
	return c.Get(ctx, client.ObjectKeyFromObject(svc), svc)
}

// waitAvailable waits up to two minutes for want available replicas of
// Deployment key.
func waitAvailable(ctx context.Context, c client.Client, key client.ObjectKey, want int32) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		if err := c.Get(ctx, key, &d); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return d.Status.AvailableReplicas >= want, nil
	})
	if err != nil {
		return fmt.Errorf("deployment %s not available: %w", key, err)
	}
	return nil
}

// waitHTTP polls url for up to a minute until it answers status with a body
// that starts with prefix; host, when set, is the request's Host header.
func waitHTTP(ctx context.Context, url, host string, status int, prefix string) error {
	httpc := &http.Client{Timeout: 2 * time.Second}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		req.Host = host
		resp, err := httpc.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		last = fmt.Sprintf("%s %q", resp.Status, body)
		return resp.StatusCode == status && strings.HasPrefix(string(body), prefix), nil
	})
	if err != nil {
		return fmt.Errorf("%s did not answer %d %q (last: %s): %w", url, status, prefix, last, err)
	}
	return nil
}
