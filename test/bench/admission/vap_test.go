//go:build linux

package admission_test

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// vapName names the ValidatingAdmissionPolicy and its binding.
const vapName = "bench-pss-restricted"

// vapValidation is one validation of the policy: the CEL counterpart of one
// rule of examples/rules/pod-security, tagged with the rule's name.
type vapValidation struct {
	rule, expression string
}

// Lists shared by several validations.
const (
	celDefaultCaps = `['AUDIT_WRITE', 'CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'MKNOD', 'NET_BIND_SERVICE', 'SETFCAP', 'SETGID', 'SETPCAP', 'SETUID', 'SYS_CHROOT']`
	celSeccomp     = `['RuntimeDefault', 'Localhost']`
)

// vapVariables are computed once per request and shared by the validations.
// containers is every container of the pod: containers, initContainers and
// ephemeralContainers.
var vapVariables = []admissionregistrationv1.Variable{
	{Name: "containers", Expression: `object.spec.containers + object.spec.?initContainers.orValue([]) + object.spec.?ephemeralContainers.orValue([])`},
	// PSS checks that are "Linux only" since v1.25 exempt spec.os.name=windows.
	{Name: "linux", Expression: `object.spec.?os.?name.orValue('') != 'windows'`},
	// Checks with a user-namespace exemption apply unless spec.hostUsers=false.
	{Name: "hostUsers", Expression: `object.spec.?hostUsers.orValue(true)`},
}

// vapValidations are the PSS baseline and restricted checks on Pods, one per
// rule of the bundle and in its order (baseline, then restricted, each
// alphabetical), so the policy does the same work as Portal. Where the
// restricted level tightens a baseline check (capabilities, seccomp,
// procMount, volumes) both are there, as both rules are in the bundle.
var vapValidations = []vapValidation{
	{"pss-baseline-app-armor-profile", `
		object.spec.?securityContext.?appArmorProfile.?type.orValue('RuntimeDefault') in ['RuntimeDefault', 'Localhost']
		&& variables.containers.all(c, c.?securityContext.?appArmorProfile.?type.orValue('RuntimeDefault') in ['RuntimeDefault', 'Localhost'])
		&& object.metadata.?annotations.orValue({}).all(k, !k.startsWith('container.apparmor.security.beta.kubernetes.io/')
			|| object.metadata.annotations[k] in ['', 'runtime/default'] || object.metadata.annotations[k].startsWith('localhost/'))`},
	{"pss-baseline-capabilities", `
		variables.containers.all(c, c.?securityContext.?capabilities.?add.orValue([]).all(a, a in ` + celDefaultCaps + `))`},
	{"pss-baseline-host-namespaces", `
		!object.spec.?hostNetwork.orValue(false) && !object.spec.?hostPID.orValue(false) && !object.spec.?hostIPC.orValue(false)`},
	{"pss-baseline-host-path-volumes", `
		object.spec.?volumes.orValue([]).all(v, !has(v.hostPath))`},
	{"pss-baseline-host-ports", `
		variables.containers.all(c, c.?ports.orValue([]).all(p, p.?hostPort.orValue(0) == 0))`},
	{"pss-baseline-host-probes-and-host-lifecycle", `
		variables.containers.all(c,
			[c.?livenessProbe, c.?readinessProbe, c.?startupProbe, c.?lifecycle.?postStart, c.?lifecycle.?preStop].all(h,
				h.?httpGet.?host.orValue('') == '' && h.?tcpSocket.?host.orValue('') == ''))`},
	{"pss-baseline-privileged", `
		variables.containers.all(c, !c.?securityContext.?privileged.orValue(false))`},
	{"pss-baseline-proc-mount", `
		!variables.hostUsers
		|| variables.containers.all(c, c.?securityContext.?procMount.orValue('Default') == 'Default')`},
	{"pss-baseline-se-linux-options", `
		([object.spec.?securityContext.?seLinuxOptions] + variables.containers.map(c, c.?securityContext.?seLinuxOptions)).all(o,
			o.?type.orValue('') in ['', 'container_t', 'container_init_t', 'container_kvm_t', 'container_engine_t']
			&& o.?user.orValue('') == '' && o.?role.orValue('') == '')`},
	{"pss-baseline-seccomp-profile", `
		object.spec.?securityContext.?seccompProfile.?type.orValue('RuntimeDefault') in ` + celSeccomp + `
		&& variables.containers.all(c, c.?securityContext.?seccompProfile.?type.orValue('RuntimeDefault') in ` + celSeccomp + `)`},
	{"pss-baseline-sysctls", `
		object.spec.?securityContext.?sysctls.orValue([]).all(s, s.name in [
			'kernel.shm_rmid_forced', 'net.ipv4.ip_local_port_range', 'net.ipv4.ip_unprivileged_port_start',
			'net.ipv4.tcp_syncookies', 'net.ipv4.ping_group_range', 'net.ipv4.ip_local_reserved_ports',
			'net.ipv4.tcp_keepalive_time', 'net.ipv4.tcp_fin_timeout', 'net.ipv4.tcp_keepalive_intvl',
			'net.ipv4.tcp_keepalive_probes', 'net.ipv4.tcp_rmem', 'net.ipv4.tcp_wmem'])`},
	{"pss-baseline-windows-host-process", `
		!object.spec.?securityContext.?windowsOptions.?hostProcess.orValue(false)
		&& variables.containers.all(c, !c.?securityContext.?windowsOptions.?hostProcess.orValue(false))`},
	{"pss-restricted-allow-privilege-escalation", `
		!variables.linux
		|| variables.containers.all(c, c.?securityContext.?allowPrivilegeEscalation.orValue(true) == false)`},
	{"pss-restricted-capabilities", `
		!variables.linux
		|| variables.containers.all(c, 'ALL' in c.?securityContext.?capabilities.?drop.orValue([])
			&& c.?securityContext.?capabilities.?add.orValue([]).all(a, a == 'NET_BIND_SERVICE'))`},
	{"pss-restricted-proc-mount", `
		variables.containers.all(c, c.?securityContext.?procMount.orValue('Default') == 'Default')`},
	{"pss-restricted-restricted-volumes", `
		object.spec.?volumes.orValue([]).all(v, has(v.configMap) || has(v.csi) || has(v.downwardAPI) || has(v.emptyDir)
			|| has(v.ephemeral) || has(v.image) || has(v.persistentVolumeClaim) || has(v.projected) || has(v.secret))`},
	{"pss-restricted-run-as-non-root", `
		!variables.hostUsers
		|| (object.spec.?securityContext.?runAsNonRoot.orValue(true)
			&& variables.containers.all(c, c.?securityContext.?runAsNonRoot.orValue(object.spec.?securityContext.?runAsNonRoot.orValue(false))))`},
	{"pss-restricted-run-as-user", `
		!variables.hostUsers
		|| (object.spec.?securityContext.?runAsUser.orValue(1) != 0
			&& variables.containers.all(c, c.?securityContext.?runAsUser.orValue(1) != 0))`},
	{"pss-restricted-seccomp-profile", `
		!variables.linux
		|| (object.spec.?securityContext.?seccompProfile.?type.orValue('RuntimeDefault') in ` + celSeccomp + `
			&& variables.containers.all(c, c.?securityContext.?seccompProfile.hasValue()
				? c.securityContext.seccompProfile.type in ` + celSeccomp + `
				: object.spec.?securityContext.?seccompProfile.hasValue()))`},
}

// validatingAdmissionPolicy is the policy: Pods on CREATE and UPDATE, fail
// closed like Portal.
func validatingAdmissionPolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	validations := make([]admissionregistrationv1.Validation, len(vapValidations))
	for i, v := range vapValidations {
		validations[i] = admissionregistrationv1.Validation{
			Expression: v.expression,
			Message:    "[" + v.rule + "] the pod fails this PSS check",
			Reason:     ptr.To(metav1.StatusReasonForbidden),
		}
	}
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: vapName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups:   []string{""},
							APIVersions: []string{"v1"},
							Resources:   []string{"pods"},
						},
					},
				}},
			},
			Variables:   vapVariables,
			Validations: validations,
		},
	}
}

// validatingAdmissionPolicyBinding binds the policy, with action Deny, to the
// one namespace of configuration (c).
func validatingAdmissionPolicyBinding(namespace string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: vapName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        vapName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: namespaceIs(namespace),
			},
		},
	}
}

// namespaceIs selects the one namespace called name.
func namespaceIs(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{name},
	}}}
}
