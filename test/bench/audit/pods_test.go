//go:build linux

package audit_test

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// compliantPod meets the PSS restricted level: the same typical workload as
// the admission benchmark's (an init container, an application container and
// a sidecar, probes, ports, resources). Nothing runs it (the control plane
// has no scheduler or kubelet).
func compliantPod(namespace, name string) *corev1.Pod {
	container := func(name, image, portName string, port int32) corev1.Container {
		c := corev1.Container{
			Name:            name,
			Image:           image,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Env:             []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
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
			Labels:    map[string]string{"app.kubernetes.io/name": "bench", "team": "platform"},
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
			Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

func appSC(p *corev1.Pod) *corev1.SecurityContext { return p.Spec.Containers[0].SecurityContext }

// violations each turn a compliant pod into one that at least one rule of
// the bundle fails; the violating pods cycle through them.
var violations = []func(*corev1.Pod){
	func(p *corev1.Pod) { appSC(p).Capabilities.Add = []corev1.Capability{"SYS_ADMIN"} },
	func(p *corev1.Pod) { p.Spec.HostPID = true },
	func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}})
	},
	func(p *corev1.Pod) { p.Spec.Containers[1].Ports[0].HostPort = 9090 },
	func(p *corev1.Pod) { appSC(p).RunAsNonRoot = ptr.To(false) },
	func(p *corev1.Pod) {
		appSC(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	},
	func(p *corev1.Pod) { appSC(p).AllowPrivilegeEscalation = nil },
	func(p *corev1.Pod) { p.Spec.Containers[1].SecurityContext.Capabilities.Drop = nil },
	func(p *corev1.Pod) { appSC(p).RunAsUser = ptr.To[int64](0) },
	func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil },
}
