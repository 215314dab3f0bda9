//go:build linux

package admission_test

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// violation is a compliant pod with one change that a rule of the bundle
// denies. Before measuring, each is sent (server-side dry run) to the three
// namespaces: (a) admits it, (b) and (c) deny it, which shows that Portal and
// the ValidatingAdmissionPolicy are in force where they should be, and only
// there, and that the CEL catches what the bundle catches.
type violation struct {
	// rules are the rules of the bundle that fail, in bundle order: (b)'s
	// denial must name exactly these; (c)'s must be the first one's, as the
	// policy reports only its first failing validation.
	rules  []string
	mutate func(*corev1.Pod)
}

func appSC(p *corev1.Pod) *corev1.SecurityContext { return p.Spec.Containers[0].SecurityContext }

var violations = []violation{
	{[]string{"pss-baseline-app-armor-profile"}, func(p *corev1.Pod) {
		appSC(p).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	}},
	{[]string{"pss-baseline-capabilities", "pss-restricted-capabilities"}, func(p *corev1.Pod) {
		appSC(p).Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
	}},
	{[]string{"pss-baseline-host-namespaces"}, func(p *corev1.Pod) { p.Spec.HostPID = true }},
	{[]string{"pss-baseline-host-path-volumes", "pss-restricted-restricted-volumes"}, func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}})
	}},
	{[]string{"pss-baseline-host-ports"}, func(p *corev1.Pod) { p.Spec.Containers[1].Ports[0].HostPort = 9090 }},
	{[]string{"pss-baseline-host-probes-and-host-lifecycle"}, func(p *corev1.Pod) {
		probe := *p.Spec.Containers[0].ReadinessProbe
		get := *probe.HTTPGet
		get.Host = "169.254.169.254"
		probe.HTTPGet = &get
		p.Spec.Containers[0].ReadinessProbe = &probe
	}},
	{[]string{"pss-baseline-privileged", "pss-restricted-allow-privilege-escalation"}, func(p *corev1.Pod) {
		sc := *p.Spec.InitContainers[0].SecurityContext
		sc.Privileged = ptr.To(true)
		sc.AllowPrivilegeEscalation = nil // the API server rejects privileged with allowPrivilegeEscalation=false
		p.Spec.InitContainers[0].SecurityContext = &sc
	}},
	// Unmasked needs a user namespace (hostUsers: false), which exempts the
	// pod from the baseline check and from runAsNonRoot and runAsUser, so
	// only the restricted check fails.
	{[]string{"pss-restricted-proc-mount"}, func(p *corev1.Pod) {
		p.Spec.HostUsers = ptr.To(false)
		appSC(p).ProcMount = ptr.To(corev1.UnmaskedProcMount)
	}},
	// A container-level runAsNonRoot=false fails restricted runAsNonRoot even
	// with the pod-level true.
	{[]string{"pss-restricted-run-as-non-root"}, func(p *corev1.Pod) { appSC(p).RunAsNonRoot = ptr.To(false) }},
	{[]string{"pss-baseline-se-linux-options"}, func(p *corev1.Pod) {
		p.Spec.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
	}},
	{[]string{"pss-baseline-seccomp-profile", "pss-restricted-seccomp-profile"}, func(p *corev1.Pod) {
		appSC(p).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	}},
	{[]string{"pss-baseline-sysctls"}, func(p *corev1.Pod) {
		p.Spec.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "kernel.shm_rmid_forced", Value: "1"}, {Name: "kernel.msgmax", Value: "65536"}}
	}},
	{[]string{"pss-baseline-host-namespaces", "pss-baseline-windows-host-process"}, func(p *corev1.Pod) {
		// A HostProcess pod must be Windows, host-networked and set it on
		// the pod, or the API server rejects it before admission; on
		// Windows the Linux-only fields must go.
		p.Spec.OS = &corev1.PodOS{Name: corev1.Windows}
		p.Spec.SecurityContext = &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			WindowsOptions: &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true), RunAsUserName: ptr.To("NT AUTHORITY\\SYSTEM")},
		}
		p.Spec.HostNetwork = true
		for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for i := range list {
				list[i].SecurityContext = nil
				list[i].Ports = nil
				list[i].LivenessProbe, list[i].ReadinessProbe = nil, nil
			}
		}
	}},
	{[]string{"pss-restricted-allow-privilege-escalation"}, func(p *corev1.Pod) { appSC(p).AllowPrivilegeEscalation = nil }},
	{[]string{"pss-restricted-capabilities"}, func(p *corev1.Pod) { p.Spec.Containers[1].SecurityContext.Capabilities.Drop = nil }},
	{[]string{"pss-restricted-restricted-volumes"}, func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/export"}}})
	}},
	{[]string{"pss-restricted-run-as-non-root"}, func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsNonRoot = nil }},
	{[]string{"pss-restricted-run-as-user"}, func(p *corev1.Pod) { appSC(p).RunAsUser = ptr.To[int64](0) }},
	{[]string{"pss-restricted-seccomp-profile"}, func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil }},
}
