//go:build linux

package benchstat

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// CompliantPod is the pod the benchmarks create and Portal admits: a
// typical workload that meets the PSS restricted level, with an init
// container, an application container and a sidecar, probes, ports,
// resources, environment and the volume kinds restricted allows. Nothing runs it (the control plane has no
// scheduler or kubelet), so the image and the ConfigMap need not exist.
func CompliantPod(namespace, name string) *corev1.Pod {
	container := func(name, image, portName string, port int32) corev1.Container {
		c := corev1.Container{
			Name:            name,
			Image:           image,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Env: []corev1.EnvVar{
				{Name: "LOG_LEVEL", Value: "info"},
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}, {Name: "config", MountPath: "/etc/app", ReadOnly: true}},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				ReadOnlyRootFilesystem:   ptr.To(true),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}
		if port != 0 {
			c.Ports = []corev1.ContainerPort{{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP}}
			probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(port)}}, PeriodSeconds: 10}
			c.LivenessProbe, c.ReadinessProbe = probe, probe
		}
		return c
	}
	init := container("init", "registry.example/app-init:1.0", "", 0)
	init.Command = []string{"/bin/migrate", "--once"}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      name,
			Labels:    map[string]string{"app.kubernetes.io/name": "bench", "app.kubernetes.io/component": "web", "team": "platform"},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{init},
			Containers: []corev1.Container{
				container("app", "registry.example/app:1.0", "http", 8080),
				container("proxy", "registry.example/proxy:1.0", "proxy", 9090),
			},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](10001),
				RunAsGroup:     ptr.To[int64](10001),
				FSGroup:        ptr.To[int64](10001),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: []corev1.Volume{
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}}}},
			},
		},
	}
}
