//go:build linux

package audit_test

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vilaca/portal/test/bench/benchstat"
)

// compliantPod is the admission benchmark's pod (benchstat.CompliantPod).
var compliantPod = benchstat.CompliantPod

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
