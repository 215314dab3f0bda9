package pod

import "github.com/vilaca/portal/internal/core"

var (
	leaf = &core.Schema{}
	open = &core.Schema{Open: true}
)

func fields(names ...string) map[string]*core.Schema {
	m := make(map[string]*core.Schema, len(names))
	for _, n := range names {
		m[n] = leaf
	}
	return m
}

func with(m map[string]*core.Schema, name string, s *core.Schema) map[string]*core.Schema {
	m[name] = s
	return m
}

// Schema describes every name Build and Generic bind, field by field.
// TestSchemaMatchesBuild keeps it in step with the maps they build.
func Schema() map[string]*core.Schema {
	image := &core.Schema{Fields: fields("reference", "registry", "name", "tag", "sha256")}
	containerSC := &core.Schema{Fields: with(
		fields("privileged", "allowPrivilegeEscalation", "readOnlyRootFilesystem", "runAsUser",
			"runAsGroup", "runAsNonRoot", "procMount", "seccompProfileType"),
		"capabilities", &core.Schema{Fields: fields("add", "drop")})}
	container := fields("name", "containerType", "command", "args", "ports")
	container["image"] = image
	container["securityContext"] = containerSC
	container["raw"] = open
	return map[string]*core.Schema{
		"object": open,
		"metadata": {Fields: with(with(fields("name", "namespace"),
			"labels", open), "annotations", open)},
		"request": {Fields: with(with(fields("operation", "dryRun"),
			"userInfo", open), "oldObject", open)},
		"spec": {Fields: fields("hostPID", "hostNetwork", "hostIPC", "serviceAccountName",
			"automountServiceAccountToken")},
		"securityContext": {Fields: fields("runAsUser", "runAsGroup", "runAsNonRoot", "fsGroup",
			"supplementalGroups", "seccompProfileType")},
		"pod":       {Fields: map[string]*core.Schema{"metadata": open, "spec": open}},
		"container": {Fields: container},
	}
}
