package pod

import "github.com/vilaca/portal/internal/core"

// The value types of the sugar's leaves, in the words of a load error.
const (
	str     = "a string"
	number  = "a number"
	boolean = "a boolean"
	list    = "a list"
)

var open = &core.Schema{Open: true}

// fields builds leaves from name, type pairs.
func fields(nameType ...string) map[string]*core.Schema {
	m := make(map[string]*core.Schema, len(nameType)/2)
	for i := 0; i+1 < len(nameType); i += 2 {
		m[nameType[i]] = &core.Schema{Type: nameType[i+1]}
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
	image := &core.Schema{Fields: fields("reference", str, "registry", str, "name", str, "tag", str, "sha256", str)}
	containerSC := &core.Schema{Fields: with(
		fields("privileged", boolean, "allowPrivilegeEscalation", boolean, "readOnlyRootFilesystem", boolean,
			"runAsUser", number, "runAsGroup", number, "runAsNonRoot", boolean, "procMount", str, "seccompProfileType", str),
		"capabilities", &core.Schema{Fields: fields("add", list, "drop", list)})}
	container := fields("name", str, "containerType", str, "command", list, "args", list, "ports", list)
	container["image"] = image
	container["securityContext"] = containerSC
	container["raw"] = open
	return map[string]*core.Schema{
		"object": open,
		"metadata": {Fields: with(with(fields("name", str, "namespace", str),
			"labels", open), "annotations", open)},
		"request": {Fields: with(with(fields("operation", str, "dryRun", boolean),
			"userInfo", open), "oldObject", open)},
		"spec": {Fields: fields("hostPID", boolean, "hostNetwork", boolean, "hostIPC", boolean,
			"serviceAccountName", str, "automountServiceAccountToken", boolean)},
		"securityContext": {Fields: fields("runAsUser", number, "runAsGroup", number, "runAsNonRoot", boolean,
			"fsGroup", number, "supplementalGroups", list, "seccompProfileType", str)},
		"pod":       {Fields: map[string]*core.Schema{"metadata": open, "spec": open}},
		"container": {Fields: container},
	}
}
