//go:build kyverno

package eval_test

import (
	"maps"
	"slices"
)

// parityCase is one generated workload of the parity benchmark: a compliant
// pod (every pair passes it) with one field changed. Its name is the object's
// name, and what docs/library.md's parity table names in "differing case".
type parityCase struct {
	name string
	// mutate changes the pod's metadata and spec.
	mutate func(meta, spec map[string]any)
}

// containerSlots are the three container lists a pod has: a container
// field is varied in each, since Kyverno's patterns name them one by one.
var containerSlots = []struct{ field, suffix, name string }{
	{"containers", "", "app"},
	{"initContainers", "-init", "init"},
	{"ephemeralContainers", "-ephemeral", "debug"},
}

// containerCases vary one container's securityContext or ports; each runs
// once per slot.
var containerCases = []struct {
	name   string
	mutate func(c, sc map[string]any)
}{
	{"privileged-true", func(_, sc map[string]any) { sc["privileged"] = true }},
	{"privileged-false", func(_, sc map[string]any) { sc["privileged"] = false }},
	{"cap-add-sys-admin", func(_, sc map[string]any) { capabilities(sc)["add"] = []any{"SYS_ADMIN"} }},
	{"cap-add-chown", func(_, sc map[string]any) { capabilities(sc)["add"] = []any{"CHOWN"} }},
	{"cap-add-net-bind-service", func(_, sc map[string]any) { capabilities(sc)["add"] = []any{"NET_BIND_SERVICE"} }},
	{"cap-drop-unset", func(_, sc map[string]any) { delete(sc, "capabilities") }},
	{"cap-drop-net-raw", func(_, sc map[string]any) { capabilities(sc)["drop"] = []any{"NET_RAW"} }},
	{"host-port-80", func(c, _ map[string]any) {
		c["ports"] = []any{map[string]any{"containerPort": int64(80), "hostPort": int64(80)}}
	}},
	{"host-port-0", func(c, _ map[string]any) {
		c["ports"] = []any{map[string]any{"containerPort": int64(80), "hostPort": int64(0)}}
	}},
	{"host-process-true", func(_, sc map[string]any) { sc["windowsOptions"] = map[string]any{"hostProcess": true} }},
	{"host-process-false", func(_, sc map[string]any) { sc["windowsOptions"] = map[string]any{"hostProcess": false} }},
	{"proc-mount-unmasked", func(_, sc map[string]any) { sc["procMount"] = "Unmasked" }},
	{"proc-mount-default", func(_, sc map[string]any) { sc["procMount"] = "Default" }},
	{"selinux-type-spc", func(_, sc map[string]any) { sc["seLinuxOptions"] = map[string]any{"type": "spc_t"} }},
	{"selinux-type-container", func(_, sc map[string]any) { sc["seLinuxOptions"] = map[string]any{"type": "container_t"} }},
	{"selinux-type-empty", func(_, sc map[string]any) { sc["seLinuxOptions"] = map[string]any{"type": ""} }},
	{"selinux-user", func(_, sc map[string]any) { sc["seLinuxOptions"] = map[string]any{"user": "system_u"} }},
	{"selinux-role", func(_, sc map[string]any) { sc["seLinuxOptions"] = map[string]any{"role": "sysadm_r"} }},
	{"selinux-level", func(_, sc map[string]any) { sc["seLinuxOptions"] = map[string]any{"level": "s0:c123,c456"} }},
	{"apparmor-field-unconfined", func(_, sc map[string]any) { sc["appArmorProfile"] = map[string]any{"type": "Unconfined"} }},
	{"apparmor-field-runtime-default", func(_, sc map[string]any) { sc["appArmorProfile"] = map[string]any{"type": "RuntimeDefault"} }},
	{"seccomp-unconfined", func(_, sc map[string]any) { sc["seccompProfile"] = map[string]any{"type": "Unconfined"} }},
	{"seccomp-localhost", func(_, sc map[string]any) {
		sc["seccompProfile"] = map[string]any{"type": "Localhost", "localhostProfile": "profiles/app.json"}
	}},
	{"allow-privilege-escalation-true", func(_, sc map[string]any) { sc["allowPrivilegeEscalation"] = true }},
	{"allow-privilege-escalation-unset", func(_, sc map[string]any) { delete(sc, "allowPrivilegeEscalation") }},
	{"run-as-user-0", func(_, sc map[string]any) { sc["runAsUser"] = int64(0) }},
	{"run-as-user-1000", func(_, sc map[string]any) { sc["runAsUser"] = int64(1000) }},
	{"run-as-non-root-false", func(_, sc map[string]any) { sc["runAsNonRoot"] = false }},
	{"run-as-group-0", func(_, sc map[string]any) { sc["runAsGroup"] = int64(0) }},
	{"run-as-group-1000", func(_, sc map[string]any) { sc["runAsGroup"] = int64(1000) }},
}

// podCases vary a pod-level field once.
var podCases = []parityCase{
	{"compliant", func(_, _ map[string]any) {}},
	{"host-network-true", func(_, spec map[string]any) { spec["hostNetwork"] = true }},
	{"host-network-false", func(_, spec map[string]any) { spec["hostNetwork"] = false }},
	{"host-pid-true", func(_, spec map[string]any) { spec["hostPID"] = true }},
	{"host-ipc-true", func(_, spec map[string]any) { spec["hostIPC"] = true }},
	{"volume-host-path", volume("hostPath", map[string]any{"path": "/var/log"})},
	{"volume-nfs", volume("nfs", map[string]any{"server": "nfs.example.com", "path": "/export"})},
	{"volume-gce-persistent-disk", volume("gcePersistentDisk", map[string]any{"pdName": "disk"})},
	{"volume-config-map", volume("configMap", map[string]any{"name": "settings"})},
	{"volume-secret", volume("secret", map[string]any{"secretName": "creds"})},
	{"volume-projected", volume("projected", map[string]any{"sources": []any{}})},
	{"volume-downward-api", volume("downwardAPI", map[string]any{"items": []any{}})},
	{"volume-pvc", volume("persistentVolumeClaim", map[string]any{"claimName": "data"})},
	{"volume-csi", volume("csi", map[string]any{"driver": "csi.example.com"})},
	{"volume-ephemeral", volume("ephemeral", map[string]any{"volumeClaimTemplate": map[string]any{"spec": map[string]any{}}})},
	{"pod-host-process-true", podSC("windowsOptions", map[string]any{"hostProcess": true})},
	{"pod-selinux-type-spc", podSC("seLinuxOptions", map[string]any{"type": "spc_t"})},
	{"pod-selinux-user", podSC("seLinuxOptions", map[string]any{"user": "system_u"})},
	{"pod-apparmor-field-unconfined", podSC("appArmorProfile", map[string]any{"type": "Unconfined"})},
	{"pod-apparmor-field-localhost", podSC("appArmorProfile", map[string]any{"type": "Localhost", "localhostProfile": "k8s-app"})},
	{"apparmor-annotation-unconfined", apparmorAnnotation("unconfined")},
	{"apparmor-annotation-runtime-default", apparmorAnnotation("runtime/default")},
	{"apparmor-annotation-localhost", apparmorAnnotation("localhost/k8s-app")},
	{"apparmor-annotation-empty", apparmorAnnotation("")},
	{"pod-seccomp-unconfined", podSC("seccompProfile", map[string]any{"type": "Unconfined"})},
	{"pod-seccomp-localhost", podSC("seccompProfile", map[string]any{"type": "Localhost", "localhostProfile": "profiles/app.json"})},
	{"pod-seccomp-unset", podSC("seccompProfile", nil)},
	{"pod-seccomp-unset-containers-set", func(_, spec map[string]any) {
		delete(spec["securityContext"].(map[string]any), "seccompProfile")
		eachContainerSC(spec, func(sc map[string]any) { sc["seccompProfile"] = map[string]any{"type": "RuntimeDefault"} })
	}},
	{"sysctl-safe", sysctl("kernel.shm_rmid_forced")},
	{"sysctl-safe-since-1-29", sysctl("net.ipv4.tcp_keepalive_time")},
	{"sysctl-unsafe", sysctl("kernel.msgmax")},
	{"pod-run-as-user-0", podSC("runAsUser", int64(0))},
	{"pod-run-as-non-root-false", podSC("runAsNonRoot", false)},
	{"pod-run-as-non-root-unset", podSC("runAsNonRoot", nil)},
	{"pod-run-as-non-root-unset-containers-set", func(_, spec map[string]any) {
		delete(spec["securityContext"].(map[string]any), "runAsNonRoot")
		eachContainerSC(spec, func(sc map[string]any) { sc["runAsNonRoot"] = true })
	}},
	{"pod-run-as-group-0", podSC("runAsGroup", int64(0))},
	{"pod-run-as-group-unset", podSC("runAsGroup", nil)},
	{"pod-run-as-group-unset-containers-set", func(_, spec map[string]any) {
		delete(spec["securityContext"].(map[string]any), "runAsGroup")
		eachContainerSC(spec, func(sc map[string]any) { sc["runAsGroup"] = int64(1000) })
	}},
	{"fs-group-0", podSC("fsGroup", int64(0))},
	{"fs-group-unset", podSC("fsGroup", nil)},
	{"supplemental-groups-0", podSC("supplementalGroups", []any{int64(0)})},
	{"supplemental-groups-1000", podSC("supplementalGroups", []any{int64(1000)})},
	{"windows-pod", func(_, spec map[string]any) {
		// The restricted standard exempts Windows pods from the Linux-only
		// checks: no seccomp, capabilities or allowPrivilegeEscalation.
		spec["os"] = map[string]any{"name": "windows"}
		delete(spec["securityContext"].(map[string]any), "seccompProfile")
		eachContainerSC(spec, func(sc map[string]any) {
			delete(sc, "capabilities")
			delete(sc, "allowPrivilegeEscalation")
		})
	}},
}

// parityCases is every generated case: the pod-level ones, then each
// container case in each slot (the slot's container added to the compliant
// pod when it is not there).
func parityCases() []parityCase {
	cases := slices.Clone(podCases)
	for _, slot := range containerSlots {
		for _, cc := range containerCases {
			cases = append(cases, parityCase{cc.name + slot.suffix, func(_, spec map[string]any) {
				if slot.field != "containers" {
					spec[slot.field] = []any{parityContainer(slot.name)}
				}
				c := spec[slot.field].([]any)[0].(map[string]any)
				cc.mutate(c, c["securityContext"].(map[string]any))
			}})
		}
	}
	return cases
}

// parityPodSpec is the compliant pod: restricted, root group nowhere.
func parityPodSpec() (meta, spec map[string]any) {
	return map[string]any{}, map[string]any{
		"securityContext": map[string]any{
			"runAsNonRoot": true, "runAsUser": int64(1000), "runAsGroup": int64(1000), "fsGroup": int64(1000),
			"seccompProfile": map[string]any{"type": "RuntimeDefault"},
		},
		"containers": []any{parityContainer("app")},
		"volumes":    []any{map[string]any{"name": "tmp", "emptyDir": map[string]any{}}},
	}
}

func parityContainer(name string) map[string]any {
	return map[string]any{
		"name": name, "image": "ghcr.io/acme/" + name + ":1.0",
		"securityContext": map[string]any{
			"allowPrivilegeEscalation": false,
			"capabilities":             map[string]any{"drop": []any{"ALL"}},
		},
	}
}

// parityObjects writes each case as a Pod and, for Kyverno's autogen rules
// and Portal's pod-template kinds, as a Deployment and a CronJob, all in
// namespace parity.
func parityObjects(cases []parityCase) []map[string]any {
	var objs []map[string]any
	for _, c := range cases {
		labels := map[string]any{"app": c.name}
		for _, kind := range parityKinds {
			meta, spec := parityPodSpec()
			c.mutate(meta, spec)
			podMeta := maps.Clone(meta)
			podMeta["labels"] = labels
			objMeta := map[string]any{"name": c.name, "namespace": "parity", "labels": labels}
			obj := map[string]any{"metadata": objMeta}
			template := map[string]any{"metadata": podMeta, "spec": spec}
			switch kind {
			case "Pod":
				maps.Copy(objMeta, podMeta)
				obj["apiVersion"], obj["spec"] = "v1", spec
			case "Deployment":
				obj["apiVersion"] = "apps/v1"
				obj["spec"] = map[string]any{"selector": map[string]any{"matchLabels": labels}, "template": template}
			case "CronJob":
				spec["restartPolicy"] = "Never"
				obj["apiVersion"] = "batch/v1"
				obj["spec"] = map[string]any{"schedule": "0 * * * *", "jobTemplate": map[string]any{
					"spec": map[string]any{"template": template},
				}}
			}
			obj["kind"] = kind
			objs = append(objs, obj)
		}
	}
	return objs
}

// parityKinds are the kinds each case is written as.
var parityKinds = []string{"Pod", "Deployment", "CronJob"}

func capabilities(sc map[string]any) map[string]any {
	c, ok := sc["capabilities"].(map[string]any)
	if !ok {
		c = map[string]any{}
		sc["capabilities"] = c
	}
	return c
}

func volume(field string, source map[string]any) func(_, spec map[string]any) {
	return func(_, spec map[string]any) {
		spec["volumes"] = append(spec["volumes"].([]any), map[string]any{"name": "extra", field: source})
	}
}

// podSC sets a pod securityContext field; nil removes it.
func podSC(field string, v any) func(_, spec map[string]any) {
	return func(_, spec map[string]any) {
		sc := spec["securityContext"].(map[string]any)
		if v == nil {
			delete(sc, field)
			return
		}
		sc[field] = v
	}
}

func apparmorAnnotation(v string) func(meta, _ map[string]any) {
	return func(meta, _ map[string]any) {
		meta["annotations"] = map[string]any{"container.apparmor.security.beta.kubernetes.io/app": v}
	}
}

func sysctl(name string) func(_, spec map[string]any) {
	return func(_, spec map[string]any) {
		spec["securityContext"].(map[string]any)["sysctls"] = []any{map[string]any{"name": name, "value": "1"}}
	}
}

func eachContainerSC(spec map[string]any, f func(sc map[string]any)) {
	for _, slot := range containerSlots {
		list, _ := spec[slot.field].([]any)
		for _, c := range list {
			f(c.(map[string]any)["securityContext"].(map[string]any))
		}
	}
}
